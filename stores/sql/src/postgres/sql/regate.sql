-- After a replay or a redrive re-opened deliveries of a gated group
-- (docs/groups.md#ordering, docs/groups.md#flow): each gate of these
-- partitions gets its heads again, at most its slots ($4: one under an
-- ordering, key_concurrency under a flow) — its leased deliveries first,
-- then its lowest open ones — and its other open deliveries are parked.
-- Only rows that change are written.
WITH gated AS (
    SELECT d.partition, d.gate, d.sequence, d.status FROM rheo_deliveries d
    WHERE d.stream = $1 AND d.group_name = $2 AND d.partition = ANY($3)
      AND d.gate IS NOT NULL AND d.status IN ('available', 'leased')
    UNION ALL
    SELECT d.partition, d.gate, d.sequence, d.status FROM rheo_deliveries d
    WHERE d.stream = $1 AND d.group_name = $2 AND d.partition = ANY($3)
      AND d.status = 'parked'
), ranked AS (
    SELECT partition, sequence, status,
           ROW_NUMBER() OVER (PARTITION BY partition, gate
                              ORDER BY (status = 'leased') DESC, sequence) AS rank
    FROM gated
)
UPDATE rheo_deliveries d
SET status = CASE WHEN r.rank <= $4 THEN 'available' ELSE 'parked' END
FROM ranked r
WHERE d.stream = $1 AND d.group_name = $2
  AND d.partition = r.partition AND d.sequence = r.sequence
  AND r.status <> 'leased' AND (r.rank <= $4) = (r.status = 'parked')
