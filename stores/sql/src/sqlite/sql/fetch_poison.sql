-- Leases that expired on their last attempt go to the dead letters, or, a
-- gated one of a group that quarantines (?7 = 1), stay leased to the
-- quarantine under a fresh lease that never expires (?8), so the gate stays
-- shut (docs/groups.md#quarantine); only a dead letter's gate is returned,
-- to be released.
UPDATE rheo_deliveries
SET status = CASE WHEN ?7 = 1 AND gate IS NOT NULL THEN 'leased' ELSE 'dead' END,
    reason = ?6,
    dead_lettered_at = CASE WHEN ?7 = 1 AND gate IS NOT NULL THEN NULL ELSE ?3 END,
    lease_id = CASE WHEN ?7 = 1 AND gate IS NOT NULL THEN lower(hex(randomblob(16))) END,
    consumer_id = CASE WHEN ?7 = 1 AND gate IS NOT NULL THEN 'rheo:quarantine'
                       ELSE consumer_id END,
    leased_at = CASE WHEN ?7 = 1 AND gate IS NOT NULL THEN ?3 ELSE leased_at END,
    expires_at = CASE WHEN ?7 = 1 AND gate IS NOT NULL THEN ?8 ELSE expires_at END,
    available_at = NULL
WHERE stream = ?1 AND group_name = ?2 AND partition IN (SELECT value FROM json_each(?5))
  AND status = 'leased' AND expires_at <= ?3 AND attempt >= ?4
RETURNING partition, CASE WHEN status = 'dead' THEN gate END
