-- Leases that expired on their last attempt go to the dead letters. The rows
-- are found through the leased index and updated by ctid (a TID scan), so the
-- plan never walks the group's history whatever the table statistics say.
WITH doomed AS (
    SELECT ctid FROM rheo_deliveries
    WHERE stream = $1 AND group_name = $2 AND partition = ANY($5)
      AND status = 'leased' AND expires_at <= $3 AND attempt >= $4
    FOR UPDATE SKIP LOCKED
)
UPDATE rheo_deliveries d
SET status = 'dead', reason = 'max_attempts_expired', dead_lettered_at = $3,
    lease_id = NULL, available_at = NULL
WHERE d.ctid = ANY (ARRAY(SELECT ctid FROM doomed))
