-- The earliest lease expiry or retry due time among the open deliveries
-- above each partition's floor (the caller has already found none due now).
SELECT MIN(c.due)
FROM rheo_group_partitions gp
CROSS JOIN LATERAL (
    SELECT MIN(CASE WHEN d.status = 'leased' THEN d.expires_at ELSE d.available_at END) AS due
    FROM rheo_deliveries d
    WHERE d.stream = gp.stream AND d.group_name = gp.group_name
      AND d.partition = gp.partition AND d.sequence >= gp.floor
      AND d.status IN ('available', 'leased')
) c
WHERE gp.stream = $1 AND gp.group_name = $2 AND gp.partition = ANY($3)
