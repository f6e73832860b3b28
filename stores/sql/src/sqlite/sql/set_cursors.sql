UPDATE rheo_group_partitions SET cursor = c.value ->> 1
FROM json_each(?3) AS c
WHERE rheo_group_partitions.rowid = (
        SELECT gp.rowid FROM rheo_group_partitions AS gp
        WHERE gp.stream = ?1 AND gp.group_name = ?2 AND gp.partition = c.value ->> 0)
