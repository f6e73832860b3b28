SELECT gp.partition, gp.cursor, p.high_watermark, gr.ordering, gr.flow
FROM rheo_group_partitions gp
JOIN rheo_partitions p ON p.stream = gp.stream AND p.partition = gp.partition
JOIN rheo_groups gr ON gr.stream = gp.stream AND gr.name = gp.group_name
WHERE gp.stream = $1 AND gp.group_name = $2 AND gp.partition = ANY($3)
ORDER BY gp.partition
FOR UPDATE OF gp
