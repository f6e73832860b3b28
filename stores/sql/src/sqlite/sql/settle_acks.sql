UPDATE rheo_deliveries SET status = 'acked', lease_id = NULL, available_at = NULL
WHERE stream = ?1 AND group_name = ?2 AND status = 'leased'
  AND (event_id, lease_id) IN (SELECT value ->> 0, value ->> 1 FROM json_each(?3))
RETURNING event_id, partition, gate
