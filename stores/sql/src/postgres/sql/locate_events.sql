SELECT id, partition, sequence FROM rheo_events WHERE stream = $1 AND id = ANY($2)
