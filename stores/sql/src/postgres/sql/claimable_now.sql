SELECT 1
FROM rheo_group_partitions gp
CROSS JOIN LATERAL (
    SELECT 1 FROM rheo_deliveries d
    WHERE d.stream = gp.stream AND d.group_name = gp.group_name
      AND d.partition = gp.partition AND d.sequence >= gp.floor
      AND d.status IN ('available', 'leased')
      AND ((d.status = 'available' AND (d.available_at IS NULL OR d.available_at <= $4))
           OR (d.status = 'leased' AND d.expires_at <= $4))
    LIMIT 1
) c
WHERE gp.stream = $1 AND gp.group_name = $2 AND gp.partition = ANY($3)
LIMIT 1
