SELECT max_attempts, retry_backoff_ms FROM rheo_groups WHERE stream = $1 AND name = $2
