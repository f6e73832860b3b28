INSERT INTO rheo_deliveries
    (stream, group_name, partition, sequence, event_id, status, attempt,
     lease_id, consumer_id, leased_at, expires_at)
SELECT ?1, ?2, m.value ->> 0, m.value ->> 1, m.value ->> 2, 'leased', 1,
       m.value ->> 3, ?3, ?4, ?5
FROM json_each(?6) AS m
