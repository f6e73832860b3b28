SELECT MIN(available_at) FROM rheo_deliveries
WHERE stream = ?1 AND group_name = ?2 AND partition = ?3 AND status = 'available'
