UPDATE rheo_group_partitions SET cursor = c.value ->> 1
FROM json_each(?3) AS c
WHERE stream = ?1 AND group_name = ?2 AND partition = c.value ->> 0
