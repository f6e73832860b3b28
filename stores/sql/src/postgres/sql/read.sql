SELECT partition, sequence, id, key, type, ts, payload, metadata
FROM rheo_events
WHERE stream = $1 AND partition = $2 AND sequence > $3
ORDER BY sequence
LIMIT $4
