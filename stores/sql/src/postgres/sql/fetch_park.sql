-- Events a fetch of an ordered group passed while their gate was busy: they
-- wait, parked, behind the gate's head (docs/groups.md#ordering).
INSERT INTO rheo_deliveries
    (stream, group_name, partition, sequence, event_id, status, attempt, gate)
SELECT $1, $2, e.partition, e.sequence, e.id, 'parked', 0,
       CASE $3::text WHEN 'key' THEN e.key WHEN 'partition' THEN '' END
FROM unnest($4::int[], $5::bigint[]) AS m(partition, sequence)
JOIN rheo_events e
  ON e.stream = $1 AND e.partition = m.partition AND e.sequence = m.sequence
