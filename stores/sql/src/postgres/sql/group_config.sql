SELECT max_attempts, retry_backoff_ms, ordering, on_exhausted, flow FROM rheo_groups WHERE stream = $1 AND name = $2
