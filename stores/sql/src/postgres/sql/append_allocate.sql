-- Each row also carries the stream's partition count, so that an append
-- routed by a count the stream no longer has (it was deleted, and perhaps
-- created again, through another server) is noticed and run again.
UPDATE rheo_partitions p SET high_watermark = p.high_watermark + c.count
FROM unnest($2::int[], $3::bigint[]) AS c(partition, count)
WHERE p.stream = $1 AND p.partition = c.partition
RETURNING p.partition, p.high_watermark,
          (SELECT s.partition_count FROM rheo_streams s WHERE s.name = $1)
