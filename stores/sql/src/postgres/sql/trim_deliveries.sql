-- Every group's deliveries of the removed events (sequences $3 to $4,
-- exclusive) go, dead letters excepted: those stay, with their event's id.
-- Each removed row's group, status and gate tell the caller what the group
-- had not settled and which gates lost their head.
--
-- Run twice, around the cursor rows' lock (trim_lock_cursors.sql), in the
-- order fetches lock them: deliveries, then cursor rows. The first run
-- waits for fetches holding delivery rows (which wait for cursor rows the
-- trim does not hold yet), the lock for fetches holding cursor rows, and
-- the second run deletes the deliveries those created meanwhile. A fetch
-- that comes later finds the cursor past the removed events.
DELETE FROM rheo_deliveries d
USING rheo_group_partitions gp
WHERE gp.stream = $1 AND gp.partition = $2
  AND d.stream = gp.stream AND d.group_name = gp.group_name AND d.partition = gp.partition
  AND d.sequence >= $3 AND d.sequence < $4 AND d.status <> 'dead'
RETURNING d.group_name, d.status, d.gate
