SELECT partition, high_watermark FROM rheo_partitions WHERE stream = ?1 ORDER BY partition
