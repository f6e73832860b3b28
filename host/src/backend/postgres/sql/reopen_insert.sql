INSERT INTO rheo_deliveries (stream, group_name, partition, sequence, event_id, status, attempt)
SELECT stream, $2, partition, sequence, id, 'available', 0
FROM rheo_events
WHERE stream = $1 AND partition = $3 AND sequence > $4 AND sequence < $5
ON CONFLICT DO NOTHING
