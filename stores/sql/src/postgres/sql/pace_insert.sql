-- Unseen events a fetch of a key_rate group reached whose key had no token
-- (docs/groups.md#flow): new deliveries, available, due at the slot their
-- bucket reserved (rows: partition, sequence, due), paced, on attempt 0.
-- Under a gating they are heads of their gate, not parked; $3 names the
-- gate as fetch_materialize.sql does (Gating::gate_source).
INSERT INTO rheo_deliveries
    (stream, group_name, partition, sequence, event_id, status, attempt,
     available_at, gate, paced)
SELECT $1, $2, e.partition, e.sequence, e.id, 'available', 0, m.due,
       CASE $3::text WHEN 'key' THEN e.key WHEN 'partition' THEN '' END, true
FROM unnest($4::int[], $5::bigint[], $6::timestamptz[]) AS m(partition, sequence, due)
JOIN rheo_events e
  ON e.stream = $1 AND e.partition = m.partition AND e.sequence = m.sequence
