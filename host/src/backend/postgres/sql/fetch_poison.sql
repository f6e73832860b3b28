WITH doomed AS (
    SELECT partition, sequence FROM rheo_deliveries
    WHERE stream = $1 AND group_name = $2 AND partition = ANY($5)
      AND status = 'leased' AND expires_at <= $3 AND attempt >= $4
    FOR UPDATE SKIP LOCKED
)
UPDATE rheo_deliveries d
SET status = 'dead', reason = 'max_attempts_expired', dead_lettered_at = $3,
    lease_id = NULL, available_at = NULL
FROM doomed
WHERE d.stream = $1 AND d.group_name = $2
  AND d.partition = doomed.partition AND d.sequence = doomed.sequence
