UPDATE rheo_partitions p SET high_watermark = p.high_watermark + c.count
FROM unnest($2::int[], $3::bigint[]) AS c(partition, count)
WHERE p.stream = $1 AND p.partition = c.partition
RETURNING p.partition, p.high_watermark
