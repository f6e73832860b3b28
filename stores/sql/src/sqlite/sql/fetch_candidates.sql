-- Claimable deliveries per partition in sequence order, at most ?5 from each
-- (one index range per partition).
SELECT d.partition, d.sequence
FROM json_each(?3) AS p
JOIN rheo_deliveries AS d ON d.rowid IN (
    SELECT r.rowid FROM rheo_deliveries AS r
    WHERE r.stream = ?1 AND r.group_name = ?2 AND r.partition = p.value
      AND r.status IN ('available', 'leased')
      AND ((r.status = 'available' AND (r.available_at IS NULL OR r.available_at <= ?4))
           OR (r.status = 'leased' AND r.expires_at <= ?4))
    ORDER BY r.sequence
    LIMIT ?5
)
