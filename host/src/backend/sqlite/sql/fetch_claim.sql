UPDATE rheo_deliveries
SET status = 'leased', attempt = attempt + 1, lease_id = ?5, consumer_id = ?6,
    leased_at = ?7, expires_at = ?8, available_at = NULL
WHERE stream = ?1 AND group_name = ?2 AND partition = ?3 AND sequence = ?4
RETURNING attempt
