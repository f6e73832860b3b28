-- Every group's deliveries of the removed events (sequences ?3 to ?4,
-- exclusive) go, dead letters excepted: those stay, with their event's id.
-- Each removed row's group, status and gate tell the caller what the group
-- had not settled and which gates lost their head. CROSS JOIN fixes the
-- join order: each group's range is read from its key, instead of the
-- planner walking the stream's deliveries. Run twice, around
-- trim_lock_cursors.sql (which matters where rows are locked: see the
-- PostgreSQL statement; the second run finds nothing here).
DELETE FROM rheo_deliveries
WHERE rowid IN (
    SELECT d.rowid FROM rheo_group_partitions AS gp
    CROSS JOIN rheo_deliveries AS d
    WHERE gp.stream = ?1 AND gp.partition = ?2
      AND d.stream = gp.stream AND d.group_name = gp.group_name AND d.partition = gp.partition
      AND d.sequence >= ?3 AND d.sequence < ?4)
  AND status <> 'dead'
RETURNING group_name, status, gate
