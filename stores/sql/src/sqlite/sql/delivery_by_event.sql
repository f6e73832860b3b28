SELECT partition, sequence, status, attempt, lease_id, consumer_id, leased_at, expires_at
FROM rheo_deliveries
WHERE stream = ?1 AND group_name = ?2 AND event_id = ?3
