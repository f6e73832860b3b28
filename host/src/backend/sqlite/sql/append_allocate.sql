UPDATE rheo_partitions SET high_watermark = high_watermark + ?3
WHERE stream = ?1 AND partition = ?2
RETURNING high_watermark
