SELECT max_attempts, retry_backoff_ms, ordering, on_exhausted FROM rheo_groups
WHERE stream = ?1 AND name = ?2
