SELECT c.partition, c.sequence
FROM unnest($3::int[]) AS p(partition)
CROSS JOIN LATERAL (
    SELECT d.partition, d.sequence FROM rheo_deliveries d
    WHERE d.stream = $1 AND d.group_name = $2 AND d.partition = p.partition
      AND d.status IN ('available', 'leased')
      AND ((d.status = 'available' AND (d.available_at IS NULL OR d.available_at <= $4))
           OR (d.status = 'leased' AND d.expires_at <= $4))
    ORDER BY d.sequence
    LIMIT $5
    FOR UPDATE SKIP LOCKED
) c
