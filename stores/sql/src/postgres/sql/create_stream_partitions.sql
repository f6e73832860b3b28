INSERT INTO rheo_partitions (stream, partition, high_watermark)
SELECT $1, p, 0 FROM generate_series(0, $2 - 1) AS p
