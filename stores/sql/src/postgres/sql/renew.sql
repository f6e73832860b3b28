-- By the full key the fencing check read, so the lookup is one index probe.
UPDATE rheo_deliveries SET expires_at = $5
WHERE stream = $1 AND group_name = $2 AND partition = $6 AND sequence = $7
  AND event_id = $3 AND status = 'leased' AND lease_id = $4
