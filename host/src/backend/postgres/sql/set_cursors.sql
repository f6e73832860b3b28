UPDATE rheo_group_partitions gp SET cursor = c.cursor
FROM unnest($3::int[], $4::bigint[]) AS c(partition, cursor)
WHERE gp.stream = $1 AND gp.group_name = $2 AND gp.partition = c.partition
