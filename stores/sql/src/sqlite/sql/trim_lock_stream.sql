-- A trim starts here (docs/log.md#retention). No row lock: BEGIN IMMEDIATE
-- already keeps every other write out while it runs.
SELECT partition_count, created_at FROM rheo_streams WHERE name = ?1
