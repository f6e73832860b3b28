INSERT INTO rheo_deliveries
    (stream, group_name, partition, sequence, event_id, status, attempt,
     lease_id, consumer_id, leased_at, expires_at)
VALUES (?1, ?2, ?3, ?4, ?5, 'leased', 1, ?6, ?7, ?8, ?9)
