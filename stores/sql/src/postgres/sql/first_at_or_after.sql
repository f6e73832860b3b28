SELECT p, (SELECT MIN(e.sequence) FROM rheo_events e
            WHERE e.stream = $1 AND e.partition = p AND e.ts >= $3)
FROM unnest($2::int[]) AS p
