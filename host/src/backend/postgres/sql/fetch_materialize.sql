INSERT INTO rheo_deliveries
    (stream, group_name, partition, sequence, event_id, status, attempt,
     lease_id, consumer_id, leased_at, expires_at)
SELECT $1, $2, e.partition, e.sequence, e.id, 'leased', 1, m.lease_id, $3, $4, $5
FROM unnest($6::int[], $7::bigint[], $8::text[]) AS m(partition, sequence, lease_id)
JOIN rheo_events e
  ON e.stream = $1 AND e.partition = m.partition AND e.sequence = m.sequence
