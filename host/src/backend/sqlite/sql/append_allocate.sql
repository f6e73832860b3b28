UPDATE rheo_partitions SET high_watermark = high_watermark + c.value ->> 1
FROM json_each(?2) AS c
WHERE stream = ?1 AND partition = c.value ->> 0
RETURNING partition, high_watermark
