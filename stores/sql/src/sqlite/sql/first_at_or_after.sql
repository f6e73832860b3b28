SELECT p.value, (SELECT MIN(e.sequence) FROM rheo_events e
                 WHERE e.stream = ?1 AND e.partition = p.value AND e.ts >= ?3)
FROM json_each(?2) AS p
