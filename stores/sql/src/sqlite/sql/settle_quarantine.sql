-- A gated head out of attempts under on_exhausted = 'quarantine'
-- (docs/groups.md#quarantine): the quarantine holds it under a fresh lease
-- that never expires, so its gate stays shut; the reason is kept. By the
-- full key the fencing check read, so the lookup is one index probe.
UPDATE rheo_deliveries
SET lease_id = ?5, consumer_id = ?6, leased_at = ?7, expires_at = ?8, reason = ?9
WHERE stream = ?1 AND group_name = ?2 AND partition = ?10 AND sequence = ?11
  AND event_id = ?3 AND status = 'leased' AND lease_id = ?4
