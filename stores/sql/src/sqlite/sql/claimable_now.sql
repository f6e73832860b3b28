SELECT 1 FROM rheo_deliveries
WHERE stream = ?1 AND group_name = ?2 AND partition IN (SELECT value FROM json_each(?3))
  AND status IN ('available', 'leased')
  AND ((status = 'available' AND (available_at IS NULL OR available_at <= ?4))
       OR (status = 'leased' AND expires_at <= ?4))
LIMIT 1
