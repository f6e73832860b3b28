SELECT name, partition_count, created_at FROM rheo_streams ORDER BY name
