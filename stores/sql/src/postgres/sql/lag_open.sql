-- Per partition: the lowest open delivery and the open ones by kind, read
-- from the partition's floor up. Parked deliveries (docs/groups.md#ordering,
-- docs/groups.md#flow) are open too: waiting behind their gate's heads,
-- never delivered or not. An available delivery not due yet is waiting,
-- never delivered or not: a retry, or one paced by flow.key_rate
-- (docs/groups.md#flow).
SELECT gp.partition, LEAST(c.first_open, k.first_parked), c.leased, c.fresh + k.fresh, c.waiting
FROM rheo_group_partitions gp
CROSS JOIN LATERAL (
    SELECT MIN(d.sequence) AS first_open,
           COUNT(*) FILTER (WHERE d.status = 'leased') AS leased,
           COUNT(*) FILTER (WHERE d.status = 'available' AND d.attempt = 0
                                AND (d.available_at IS NULL OR d.available_at <= $3)) AS fresh,
           COUNT(*) FILTER (WHERE d.status = 'available' AND d.available_at > $3) AS waiting
    FROM rheo_deliveries d
    WHERE d.stream = gp.stream AND d.group_name = gp.group_name
      AND d.partition = gp.partition AND d.sequence >= gp.floor
      AND d.status IN ('available', 'leased')
) c
CROSS JOIN LATERAL (
    SELECT MIN(d.sequence) AS first_parked,
           COUNT(*) FILTER (WHERE d.attempt = 0) AS fresh
    FROM rheo_deliveries d
    WHERE d.stream = gp.stream AND d.group_name = gp.group_name
      AND d.partition = gp.partition AND d.sequence >= gp.floor
      AND d.status = 'parked'
) k
WHERE gp.stream = $1 AND gp.group_name = $2
  AND (c.first_open IS NOT NULL OR k.first_parked IS NOT NULL)
