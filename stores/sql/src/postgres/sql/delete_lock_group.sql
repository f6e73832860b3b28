-- A group's delete starts here, after the stream's row (lock_stream.sql):
-- the group's row, held until the delete commits, keeps replays, redrives
-- and resets out (lock_group.sql) and says whether the group exists.
SELECT 1 FROM rheo_groups WHERE stream = $1 AND name = $2 FOR UPDATE
