-- Dead letters, and heads the quarantine holds (docs/groups.md#quarantine),
-- which a release redrives: their attempts start over too.
UPDATE rheo_deliveries
SET status = 'available', attempt = 0, available_at = NULL, paced = NULL, lease_id = NULL, dead_lettered_at = NULL
WHERE stream = ?1 AND group_name = ?2 AND event_id IN (SELECT value FROM json_each(?3))
  AND (status = 'dead' OR (status = 'leased' AND consumer_id = 'rheo:quarantine'))
RETURNING partition, sequence
