-- Whether the group exists (BEGIN IMMEDIATE already keeps every other write
-- out).
SELECT 1 FROM rheo_groups WHERE stream = ?1 AND name = ?2
