SELECT MIN(sequence) FROM rheo_events
WHERE stream = ?1 AND partition = ?2 AND ts >= ?3
