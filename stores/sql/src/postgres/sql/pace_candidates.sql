-- The claimable deliveries of a key_rate group (docs/groups.md#flow), as
-- fetch_candidates.sql finds them (locked, rows other fetchers hold
-- skipped), with what a claim asks the key's bucket: the event's key, the
-- paced mark (1 or 0) and whether its lease expired (1 or 0: never paced,
-- counted). Rows ($5, $6): (partition, after), at most $4 of each
-- partition's above `after` and its floor, in sequence order.
SELECT c.partition, c.sequence, e.key, c.paced, c.expired
FROM unnest($5::int[], $6::bigint[]) AS a(partition, after)
JOIN rheo_group_partitions gp
  ON gp.stream = $1 AND gp.group_name = $2 AND gp.partition = a.partition
CROSS JOIN LATERAL (
    SELECT d.partition, d.sequence, CASE WHEN d.paced THEN 1 ELSE 0 END AS paced,
           CASE WHEN d.status = 'leased' THEN 1 ELSE 0 END AS expired
    FROM rheo_deliveries d
    WHERE d.stream = gp.stream AND d.group_name = gp.group_name
      AND d.partition = gp.partition AND d.sequence >= gp.floor AND d.sequence > a.after
      AND d.status IN ('available', 'leased')
      AND ((d.status = 'available' AND (d.available_at IS NULL OR d.available_at <= $3))
           OR (d.status = 'leased' AND d.expires_at <= $3))
    ORDER BY d.sequence
    LIMIT $4
    FOR UPDATE OF d SKIP LOCKED
) c
JOIN rheo_events e ON e.stream = $1 AND e.partition = c.partition AND e.sequence = c.sequence
