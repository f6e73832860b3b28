-- Every dead letter whose event the stream still holds: one below the
-- partition's first sequence lost its event to retention, has nothing to
-- deliver, and stays (docs/log.md#retention).
UPDATE rheo_deliveries
SET status = 'available', attempt = 0, available_at = NULL, paced = NULL, lease_id = NULL, dead_lettered_at = NULL
WHERE stream = ?1 AND group_name = ?2 AND status = 'dead'
  AND sequence >= (SELECT p.first_sequence FROM rheo_partitions AS p
                   WHERE p.stream = ?1 AND p.partition = rheo_deliveries.partition)
RETURNING partition, sequence
