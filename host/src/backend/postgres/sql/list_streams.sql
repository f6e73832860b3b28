SELECT s.name, s.partition_count, s.created_at,
       array_agg(p.high_watermark ORDER BY p.partition)
FROM rheo_streams s
JOIN rheo_partitions p ON p.stream = s.name
GROUP BY s.name, s.partition_count, s.created_at
ORDER BY s.name COLLATE "C"
