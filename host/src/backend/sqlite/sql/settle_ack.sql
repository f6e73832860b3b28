UPDATE rheo_deliveries SET status = 'acked', lease_id = NULL, available_at = NULL
WHERE stream = ?1 AND group_name = ?2 AND event_id = ?3 AND status = 'leased' AND lease_id = ?4
