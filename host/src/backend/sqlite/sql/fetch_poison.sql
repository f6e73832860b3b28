UPDATE rheo_deliveries
SET status = 'dead', reason = 'max_attempts_expired', dead_lettered_at = ?3,
    lease_id = NULL, available_at = NULL
WHERE stream = ?1 AND group_name = ?2 AND partition = ?5
  AND status = 'leased' AND expires_at <= ?3 AND attempt >= ?4
