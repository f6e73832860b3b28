-- Each row also carries the stream's partition count, so that an append
-- routed by a count the stream no longer has (deleted, and perhaps created
-- again, since the caller read it) is noticed and run again.
UPDATE rheo_partitions SET high_watermark = high_watermark + c.value ->> 1
FROM json_each(?2) AS c
WHERE rheo_partitions.rowid = (SELECT p.rowid FROM rheo_partitions AS p
                               WHERE p.stream = ?1 AND p.partition = c.value ->> 0)
RETURNING partition, high_watermark,
          (SELECT s.partition_count FROM rheo_streams AS s WHERE s.name = ?1)
