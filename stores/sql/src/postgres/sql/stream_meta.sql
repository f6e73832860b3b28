SELECT partition_count, created_at FROM rheo_streams WHERE name = $1
