-- Leases that expired on their last attempt go to the dead letters.
UPDATE rheo_deliveries
SET status = 'dead', reason = ?6, dead_lettered_at = ?3, lease_id = NULL, available_at = NULL
WHERE stream = ?1 AND group_name = ?2 AND partition IN (SELECT value FROM json_each(?5))
  AND status = 'leased' AND expires_at <= ?3 AND attempt >= ?4
RETURNING partition, gate
