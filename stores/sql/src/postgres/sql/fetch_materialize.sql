-- New deliveries, leased. $6 is what the group's gates are named after
-- ('key' under ordering key or a key_concurrency, 'partition', or 'none':
-- Gating::gate_source): it names each one's gate (docs/groups.md#ordering,
-- docs/groups.md#flow).
INSERT INTO rheo_deliveries
    (stream, group_name, partition, sequence, event_id, status, attempt,
     lease_id, consumer_id, leased_at, expires_at, gate)
SELECT $1, $2, e.partition, e.sequence, e.id, 'leased', 1, m.lease_id, $3, $4, $5,
       CASE $6::text WHEN 'key' THEN e.key WHEN 'partition' THEN '' END
FROM unnest($7::int[], $8::bigint[], $9::text[]) AS m(partition, sequence, lease_id)
JOIN rheo_events e
  ON e.stream = $1 AND e.partition = m.partition AND e.sequence = m.sequence
