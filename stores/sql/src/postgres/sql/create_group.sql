INSERT INTO rheo_groups (stream, name, max_attempts, retry_backoff_ms, created_at, ordering, on_exhausted, flow)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
