SELECT partition, sequence, id, key, type, ts, payload, metadata
FROM rheo_events
WHERE stream = ?1
  AND (partition, sequence) IN (SELECT value ->> 0, value ->> 1 FROM json_each(?2))
