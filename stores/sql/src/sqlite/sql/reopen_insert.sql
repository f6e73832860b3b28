-- Deliveries for the events of a replayed range the group never had; ?6 is
-- what the group's gates are named after ('key' under ordering key or a
-- key_concurrency, 'partition', or 'none': Gating::gate_source), which
-- names each one's gate (docs/groups.md#flow).
INSERT INTO rheo_deliveries (stream, group_name, partition, sequence, event_id, status, attempt, gate)
SELECT stream, ?2, partition, sequence, id, 'available', 0,
       CASE ?6 WHEN 'key' THEN key WHEN 'partition' THEN '' END
FROM rheo_events
WHERE stream = ?1 AND partition = ?3 AND sequence > ?4 AND sequence < ?5
ON CONFLICT DO NOTHING
