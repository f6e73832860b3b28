INSERT INTO rheo_deliveries
    (stream, group_name, partition, sequence, event_id, status, attempt,
     lease_id, consumer_id, leased_at, expires_at)
SELECT $1, $2, m.partition, m.sequence, m.event_id, 'leased', 1, m.lease_id, $3, $4, $5
FROM unnest($6::int[], $7::bigint[], $8::text[], $9::text[])
     AS m(partition, sequence, event_id, lease_id)
