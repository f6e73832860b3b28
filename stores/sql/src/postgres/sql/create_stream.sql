INSERT INTO rheo_streams (name, partition_count, created_at) VALUES ($1, $2, $3)
