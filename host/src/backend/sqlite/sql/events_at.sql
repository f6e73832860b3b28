SELECT partition, sequence, id, key, type, ts, payload, metadata
FROM rheo_events
WHERE stream = ?1 AND (partition, sequence) IN (VALUES {rows})
