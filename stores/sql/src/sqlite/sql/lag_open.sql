-- Per partition: the lowest open delivery and the open ones by kind. Parked
-- deliveries (docs/groups.md#ordering, docs/groups.md#flow) are open too:
-- waiting behind their gate's heads, never delivered or not. An available
-- delivery not due yet is waiting, never delivered or not: a retry, or one
-- paced by flow.key_rate (docs/groups.md#flow).
SELECT partition, MIN(first_open), SUM(leased), SUM(fresh), SUM(waiting)
FROM (
    SELECT partition,
           MIN(sequence) AS first_open,
           SUM(status = 'leased') AS leased,
           SUM(status = 'available' AND attempt = 0
               AND (available_at IS NULL OR available_at <= ?3)) AS fresh,
           SUM(status = 'available' AND available_at IS NOT NULL AND available_at > ?3) AS waiting
    FROM rheo_deliveries
    WHERE stream = ?1 AND group_name = ?2 AND status IN ('available', 'leased')
    GROUP BY partition
    UNION ALL
    SELECT partition, MIN(sequence), 0, SUM(attempt = 0), 0
    FROM rheo_deliveries
    WHERE stream = ?1 AND group_name = ?2 AND status = 'parked'
    GROUP BY partition
)
GROUP BY partition
