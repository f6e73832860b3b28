INSERT INTO rheo_streams (name, partition_count, created_at, retention) VALUES ($1, $2, $3, $4)
