-- Every partition's high watermark and first stored sequence, each row with
-- the stream's retention (docs/log.md#retention).
SELECT p.partition, p.high_watermark, p.first_sequence, s.retention
FROM rheo_partitions p
JOIN rheo_streams s ON s.name = p.stream
WHERE p.stream = $1
ORDER BY p.partition
