-- By the full key the fencing check read, so the lookup is one index probe.
UPDATE rheo_deliveries
SET status = 'dead', lease_id = NULL, available_at = NULL, reason = $5, dead_lettered_at = $6
WHERE stream = $1 AND group_name = $2 AND partition = $7 AND sequence = $8
  AND event_id = $3 AND status = 'leased' AND lease_id = $4
RETURNING gate
