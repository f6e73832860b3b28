-- Per partition: the group's cursor, the high watermark, the first stored
-- sequence, and the events retention removed before the group settled them.
SELECT gp.partition, gp.cursor, p.high_watermark, p.first_sequence, gp.skipped
FROM rheo_group_partitions gp
JOIN rheo_partitions p ON p.stream = gp.stream AND p.partition = gp.partition
WHERE gp.stream = ?1 AND gp.group_name = ?2
ORDER BY gp.partition
