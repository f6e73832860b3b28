UPDATE rheo_deliveries SET status = 'available', lease_id = NULL, available_at = ?5, reason = ?6
WHERE stream = ?1 AND group_name = ?2 AND partition = ?7 AND sequence = ?8
  AND event_id = ?3 AND status = 'leased' AND lease_id = ?4
