-- The earliest lease expiry or retry due time (the caller has already found
-- none due now), each read from its time-ordered index.
SELECT MIN(due) FROM (
    SELECT * FROM (SELECT expires_at AS due FROM rheo_deliveries
                   WHERE stream = ?1 AND group_name = ?2 AND status = 'leased'
                     AND partition IN (SELECT value FROM json_each(?3))
                   ORDER BY expires_at LIMIT 1)
    UNION ALL
    SELECT * FROM (SELECT available_at AS due FROM rheo_deliveries
                   WHERE stream = ?1 AND group_name = ?2 AND status = 'available'
                     AND available_at IS NOT NULL
                     AND partition IN (SELECT value FROM json_each(?3))
                   ORDER BY available_at LIMIT 1)
)
