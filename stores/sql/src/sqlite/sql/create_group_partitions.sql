INSERT INTO rheo_group_partitions (stream, group_name, partition, cursor)
SELECT ?1, ?2, r.value ->> 0, r.value ->> 1 FROM json_each(?3) AS r
