-- Leases that expired on their last attempt go to the dead letters. The rows
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
SET status = 'dead', reason = $6, dead_lettered_at = $3,
    lease_id = NULL, available_at = NULL
WHERE d.ctid = ANY (ARRAY(SELECT ctid FROM doomed))
RETURNING d.partition, d.gate
