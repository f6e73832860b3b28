-- After a replay or a redrive re-opened deliveries of a gated group
-- (docs/groups.md#ordering, docs/groups.md#flow): each gate of these
-- partitions gets its heads again, at most its slots (?4: one under an
-- ordering, key_concurrency under a flow) — its leased deliveries first,
-- then its lowest open ones — and its other open deliveries are parked.
-- Only rows that change are written.
WITH gated AS (
    SELECT d.rowid AS id, d.partition, d.gate, d.sequence, d.status FROM rheo_deliveries AS d
    WHERE d.stream = ?1 AND d.group_name = ?2 AND d.partition IN (SELECT value FROM json_each(?3))
      AND d.gate IS NOT NULL AND d.status IN ('available', 'leased')
    UNION ALL
    SELECT d.rowid AS id, d.partition, d.gate, d.sequence, d.status FROM rheo_deliveries AS d
    WHERE d.stream = ?1 AND d.group_name = ?2 AND d.partition IN (SELECT value FROM json_each(?3))
      AND d.status = 'parked'
), ranked AS (
    SELECT id, status,
           ROW_NUMBER() OVER (PARTITION BY partition, gate
                              ORDER BY (status = 'leased') DESC, sequence) AS rank
    FROM gated
)
UPDATE rheo_deliveries
SET status = CASE WHEN r.rank <= ?4 THEN 'available' ELSE 'parked' END
FROM ranked AS r
WHERE rheo_deliveries.rowid = r.id
  AND r.status <> 'leased' AND (r.rank <= ?4) = (r.status = 'parked')
