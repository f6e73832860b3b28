INSERT INTO rheo_deliveries
    (stream, group_name, consumer_id, leased_at, expires_at, status, attempt,
     partition, sequence, event_id, lease_id)
VALUES {rows}
