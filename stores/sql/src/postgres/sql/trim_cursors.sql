-- Groups a trim moved (docs/log.md#retention): each row names the group,
-- its cursor (at least the new log start), the events it had not settled
-- that the trim removed, and the new log start, to which the scan floor
-- rises: the trim deleted every open delivery below it.
UPDATE rheo_group_partitions gp
SET cursor = c.cursor, skipped = gp.skipped + c.skipped, floor = GREATEST(gp.floor, c.floor)
FROM unnest($3::text[], $4::bigint[], $5::bigint[], $6::bigint[])
     AS c(group_name, cursor, skipped, floor)
WHERE gp.stream = $1 AND gp.group_name = c.group_name AND gp.partition = $2
