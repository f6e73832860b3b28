INSERT INTO rheo_groups (stream, name, max_attempts, retry_backoff_ms, created_at, ordering)
VALUES (?1, ?2, ?3, ?4, ?5, ?6)
