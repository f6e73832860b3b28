SELECT stream, partition, high_watermark, first_sequence FROM rheo_partitions
ORDER BY stream, partition
