-- A reset: the partitions' deliveries were deleted, so nothing is open below
-- the new cursor and the floor moves with it.
UPDATE rheo_group_partitions gp SET cursor = c.cursor, floor = c.cursor
FROM unnest($3::int[], $4::bigint[]) AS c(partition, cursor)
WHERE gp.stream = $1 AND gp.group_name = $2 AND gp.partition = c.partition
