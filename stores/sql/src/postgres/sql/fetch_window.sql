-- The keys of a partition's events from $3 to $4, which a fetch of a
-- gated group (an ordering, or a key_concurrency) is about to pass.
SELECT sequence, key FROM rheo_events
WHERE stream = $1 AND partition = $2 AND sequence >= $3 AND sequence <= $4
ORDER BY sequence
