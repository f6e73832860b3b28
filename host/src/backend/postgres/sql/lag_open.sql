SELECT partition,
       MIN(sequence),
       COUNT(*) FILTER (WHERE status = 'leased'),
       COUNT(*) FILTER (WHERE status = 'available' AND attempt = 0),
       COUNT(*) FILTER (WHERE status = 'available' AND available_at > $3)
FROM rheo_deliveries
WHERE stream = $1 AND group_name = $2 AND status IN ('available', 'leased')
GROUP BY partition
