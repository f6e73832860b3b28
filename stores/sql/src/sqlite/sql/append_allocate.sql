UPDATE rheo_partitions SET high_watermark = high_watermark + c.value ->> 1
FROM json_each(?2) AS c
WHERE rheo_partitions.rowid = (SELECT p.rowid FROM rheo_partitions AS p
                               WHERE p.stream = ?1 AND p.partition = c.value ->> 0)
RETURNING partition, high_watermark
