-- A stream's delete, second: every group's row, so that a replay, redrive
-- or reset still creating deliveries (lock_group.sql) commits first and its
-- deliveries are deleted too, and none starts until the delete is over.
SELECT 1 FROM rheo_groups WHERE stream = $1 ORDER BY name COLLATE "C" FOR UPDATE
