-- A trim, second: every group's row of the stream, in the order a stream's
-- delete takes them (delete_lock_groups.sql). A replay, redrive or reset
-- (lock_group.sql, lock_group_reset.sql) re-opens deliveries or moves
-- cursors from what it read of the log start: one under way commits first,
-- and one that comes later reads the log start the trim leaves.
SELECT 1 FROM rheo_groups WHERE stream = $1 ORDER BY name COLLATE "C" FOR NO KEY UPDATE
