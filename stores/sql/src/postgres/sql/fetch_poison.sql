-- Leases that expired on their last attempt go to the dead letters, or, a
-- gated one of a group that quarantines ($7 = 1), stay leased to the
-- quarantine under a fresh lease that never expires ($8), so the gate stays
-- shut (docs/groups.md#quarantine); only a dead letter's gate is returned,
-- to be released. The rows
-- are found among the open deliveries above each partition's floor and
-- updated by ctid (a TID scan), so the plan never walks the group's history
-- whatever the table statistics say.
WITH doomed AS (
    SELECT d.ctid
    FROM rheo_group_partitions gp
    CROSS JOIN LATERAL (
        SELECT r.ctid FROM rheo_deliveries r
        WHERE r.stream = gp.stream AND r.group_name = gp.group_name
          AND r.partition = gp.partition AND r.sequence >= gp.floor
          AND r.status IN ('available', 'leased')
          AND r.status = 'leased' AND r.expires_at <= $3 AND r.attempt >= $4
        FOR UPDATE OF r SKIP LOCKED
    ) d
    WHERE gp.stream = $1 AND gp.group_name = $2 AND gp.partition = ANY($5)
)
UPDATE rheo_deliveries d
SET status = CASE WHEN $7 = 1 AND d.gate IS NOT NULL THEN 'leased' ELSE 'dead' END,
    reason = $6,
    dead_lettered_at = CASE WHEN $7 = 1 AND d.gate IS NOT NULL THEN NULL ELSE $3 END,
    lease_id = CASE WHEN $7 = 1 AND d.gate IS NOT NULL THEN gen_random_uuid()::text END,
    consumer_id = CASE WHEN $7 = 1 AND d.gate IS NOT NULL THEN 'rheo:quarantine'
                       ELSE d.consumer_id END,
    leased_at = CASE WHEN $7 = 1 AND d.gate IS NOT NULL THEN $3 ELSE d.leased_at END,
    expires_at = CASE WHEN $7 = 1 AND d.gate IS NOT NULL THEN $8 ELSE d.expires_at END,
    available_at = NULL
WHERE d.ctid = ANY (ARRAY(SELECT ctid FROM doomed))
RETURNING d.partition, CASE WHEN d.status = 'dead' THEN d.gate END
