INSERT INTO rheo_deliveries
    (stream, group_name, partition, sequence, event_id, status, attempt,
     lease_id, consumer_id, leased_at, expires_at)
SELECT ?1, ?2, e.partition, e.sequence, e.id, 'leased', 1, m.value ->> 2, ?3, ?4, ?5
FROM json_each(?6) AS m
JOIN rheo_events e ON e.stream = ?1 AND e.partition = m.value ->> 0 AND e.sequence = m.value ->> 1
