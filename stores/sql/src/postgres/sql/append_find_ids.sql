SELECT partition, sequence, id, key, type, ts, payload, metadata
FROM rheo_events WHERE stream = $1 AND id = ANY($2)
