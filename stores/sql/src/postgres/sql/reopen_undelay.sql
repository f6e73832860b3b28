UPDATE rheo_deliveries SET available_at = NULL, paced = NULL
WHERE stream = $1 AND group_name = $2 AND partition = $3 AND sequence > $4 AND sequence < $5
  AND status IN ('available', 'parked') AND available_at IS NOT NULL
