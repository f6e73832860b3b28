-- No row lock: BEGIN IMMEDIATE already keeps every other write out.
SELECT g.max_attempts, g.retry_backoff_ms, g.ordering, s.partition_count, s.created_at,
       g.on_exhausted, g.flow
FROM rheo_groups g
JOIN rheo_streams s ON s.name = g.stream
WHERE g.stream = ?1 AND g.name = ?2
