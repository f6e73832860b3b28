-- A replay or redrive: the group's settings read afresh, its row held until
-- the transaction ends against a delete of the group or stream
-- (delete_lock_group.sql, delete_lock_groups.sql), so that no delivery it
-- creates outlives a delete, and against a reset (lock_group_reset.sql),
-- so that it never re-opens deliveries below a cursor a reset is moving.
-- With the stream's partition count and creation time, to check what the
-- caller kept of the stream.
SELECT g.max_attempts, g.retry_backoff_ms, g.ordering, s.partition_count, s.created_at,
       g.on_exhausted, g.flow
FROM rheo_groups g
JOIN rheo_streams s ON s.name = g.stream
WHERE g.stream = $1 AND g.name = $2
FOR SHARE OF g
