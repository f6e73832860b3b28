DELETE FROM rheo_deliveries
WHERE stream = $1 AND group_name = $2 AND partition = ANY($3)
