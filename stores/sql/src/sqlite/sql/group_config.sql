SELECT max_attempts, retry_backoff_ms, ordering FROM rheo_groups
WHERE stream = ?1 AND name = ?2
