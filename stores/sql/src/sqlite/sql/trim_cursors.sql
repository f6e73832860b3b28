-- Groups a trim moved (docs/log.md#retention): each row names the group,
-- its cursor (at least the new log start), the events it had not settled
-- that the trim removed, and the new log start (the scan floor where the
-- dialect keeps one; SQLite keeps none).
UPDATE rheo_group_partitions SET cursor = c.value ->> 1, skipped = skipped + (c.value ->> 2)
FROM json_each(?3) AS c
WHERE rheo_group_partitions.rowid = (
        SELECT gp.rowid FROM rheo_group_partitions AS gp
        WHERE gp.stream = ?1 AND gp.group_name = c.value ->> 0 AND gp.partition = ?2)
