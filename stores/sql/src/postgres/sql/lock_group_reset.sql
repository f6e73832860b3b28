-- A reset: lock_group.sql, holding the row against replays, redrives and
-- other resets too (which a replay's does not), and for the reset's own
-- change of the group's ordering and flow (set_ordering.sql).
SELECT g.max_attempts, g.retry_backoff_ms, g.ordering, s.partition_count, s.created_at,
       g.on_exhausted, g.flow
FROM rheo_groups g
JOIN rheo_streams s ON s.name = g.stream
WHERE g.stream = $1 AND g.name = $2
FOR NO KEY UPDATE OF g
