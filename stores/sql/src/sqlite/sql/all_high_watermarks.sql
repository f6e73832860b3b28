SELECT stream, partition, high_watermark FROM rheo_partitions ORDER BY stream, partition
