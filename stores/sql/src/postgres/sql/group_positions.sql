SELECT gp.partition, gp.cursor, p.high_watermark
FROM rheo_group_partitions gp
JOIN rheo_partitions p ON p.stream = gp.stream AND p.partition = gp.partition
WHERE gp.stream = $1 AND gp.group_name = $2
ORDER BY gp.partition
