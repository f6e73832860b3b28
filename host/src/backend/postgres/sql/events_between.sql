SELECT partition, sequence, id, key, type, ts, payload, metadata
FROM rheo_events
WHERE stream = $1 AND partition = $2 AND sequence >= $3 AND sequence < $4
ORDER BY sequence
