-- Events a fetch of a gated group passed while their gate was full: they
-- wait, parked, behind the gate's heads (docs/groups.md#ordering,
-- docs/groups.md#flow). ?3 is what the group's gates are named after
-- ('key', 'partition': Gating::gate_source).
INSERT INTO rheo_deliveries
    (stream, group_name, partition, sequence, event_id, status, attempt, gate)
SELECT ?1, ?2, e.partition, e.sequence, e.id, 'parked', 0,
       CASE ?3 WHEN 'key' THEN e.key WHEN 'partition' THEN '' END
FROM json_each(?4) AS m
CROSS JOIN rheo_events AS e
WHERE e.stream = ?1 AND e.partition = m.value ->> 0 AND e.sequence = m.value ->> 1
