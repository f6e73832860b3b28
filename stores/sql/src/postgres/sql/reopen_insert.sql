-- Deliveries for the events of a replayed range the group has no row of;
-- $6 is what the group's gates are named after ('key' under ordering key or
-- a key_concurrency, 'partition', or 'none': Gating::gate_source), which
-- names each one's gate (docs/groups.md#flow). An event at or
-- before the partition's `started_after` was never delivered (attempt 0);
-- one after it was acked on its first attempt, which left no row
-- (migrations/postgres/0009_first_acks_leave_no_row.sql): attempt 1.
INSERT INTO rheo_deliveries (stream, group_name, partition, sequence, event_id, status, attempt, gate)
SELECT e.stream, $2, e.partition, e.sequence, e.id, 'available',
       CASE WHEN e.sequence > gp.started_after THEN 1 ELSE 0 END,
       CASE $6::text WHEN 'key' THEN e.key WHEN 'partition' THEN '' END
FROM rheo_events e
JOIN rheo_group_partitions gp
  ON gp.stream = e.stream AND gp.group_name = $2 AND gp.partition = e.partition
WHERE e.stream = $1 AND e.partition = $3 AND e.sequence > $4 AND e.sequence < $5
ON CONFLICT DO NOTHING
