-- Unseen events a fetch of a key_rate group reached whose key had no token
-- (docs/groups.md#flow): new deliveries, available, due at the slot their
-- bucket reserved (rows: partition, sequence, due), paced, on attempt 0.
-- Under a gating they are heads of their gate, not parked; ?3 names the
-- gate as fetch_materialize.sql does (Gating::gate_source).
INSERT INTO rheo_deliveries
    (stream, group_name, partition, sequence, event_id, status, attempt,
     available_at, gate, paced)
SELECT ?1, ?2, e.partition, e.sequence, e.id, 'available', 0, m.value ->> 2,
       CASE ?3 WHEN 'key' THEN e.key WHEN 'partition' THEN '' END, 1
FROM json_each(?4) AS m
CROSS JOIN rheo_events AS e
WHERE e.stream = ?1 AND e.partition = m.value ->> 0 AND e.sequence = m.value ->> 1
