SELECT partition, sequence, id, key, type, ts, payload, metadata
FROM rheo_events WHERE stream = ?1 AND id IN (SELECT value FROM json_each(?2))
