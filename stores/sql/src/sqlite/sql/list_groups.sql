SELECT name, max_attempts, retry_backoff_ms, created_at, ordering, on_exhausted, flow FROM rheo_groups
WHERE stream = ?1 ORDER BY name
