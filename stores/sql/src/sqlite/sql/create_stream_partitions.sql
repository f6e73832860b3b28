WITH RECURSIVE p(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM p WHERE i + 1 < ?2)
INSERT INTO rheo_partitions (stream, partition, high_watermark)
SELECT ?1, i, 0 FROM p
