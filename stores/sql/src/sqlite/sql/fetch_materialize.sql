-- New deliveries, leased. ?6 is what the group's gates are named after
-- ('key' under ordering key or a key_concurrency, 'partition', or 'none':
-- Gating::gate_source): it names each one's gate (docs/groups.md#ordering,
-- docs/groups.md#flow). CROSS JOIN fixes the join order: each new
-- delivery looks its event up by position, instead of the planner walking
-- the stream's events.
INSERT INTO rheo_deliveries
    (stream, group_name, partition, sequence, event_id, status, attempt,
     lease_id, consumer_id, leased_at, expires_at, gate)
SELECT ?1, ?2, e.partition, e.sequence, e.id, 'leased', 1, m.value ->> 2, ?3, ?4, ?5,
       CASE ?6 WHEN 'key' THEN e.key WHEN 'partition' THEN '' END
FROM json_each(?7) AS m
CROSS JOIN rheo_events AS e
WHERE e.stream = ?1 AND e.partition = m.value ->> 0 AND e.sequence = m.value ->> 1
