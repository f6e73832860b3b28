-- A reset: the partitions' deliveries were deleted, so nothing is open below
-- the new cursor and the floor moves with it; the group starts after the
-- sequence below it (migrations/postgres/0009_first_acks_leave_no_row.sql).
UPDATE rheo_group_partitions gp
SET cursor = c.cursor, floor = c.cursor, started_after = c.cursor - 1
FROM unnest($3::int[], $4::bigint[]) AS c(partition, cursor)
WHERE gp.stream = $1 AND gp.group_name = $2 AND gp.partition = c.partition
