UPDATE rheo_deliveries
SET status = 'available', attempt = 0, available_at = NULL, lease_id = NULL, dead_lettered_at = NULL
WHERE stream = $1 AND group_name = $2 AND status = 'dead'
RETURNING partition, sequence
