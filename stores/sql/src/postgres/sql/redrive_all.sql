-- Every dead letter whose event the stream still holds: one below the
-- partition's first sequence lost its event to retention, has nothing to
-- deliver, and stays (docs/log.md#retention). The caller holds the group's
-- row, which a trim waits for.
UPDATE rheo_deliveries d
SET status = 'available', attempt = 0, available_at = NULL, paced = NULL, lease_id = NULL, dead_lettered_at = NULL
WHERE d.stream = $1 AND d.group_name = $2 AND d.status = 'dead'
  AND d.sequence >= (SELECT p.first_sequence FROM rheo_partitions p
                     WHERE p.stream = $1 AND p.partition = d.partition)
RETURNING d.partition, d.sequence
