SELECT name, partition_count, created_at, retention FROM rheo_streams ORDER BY name COLLATE "C"
