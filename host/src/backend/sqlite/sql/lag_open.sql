SELECT partition,
       MIN(sequence),
       SUM(status = 'leased'),
       SUM(status = 'available' AND attempt = 0),
       SUM(status = 'available' AND available_at IS NOT NULL AND available_at > ?3)
FROM rheo_deliveries
WHERE stream = ?1 AND group_name = ?2 AND status IN ('available', 'leased')
GROUP BY partition
