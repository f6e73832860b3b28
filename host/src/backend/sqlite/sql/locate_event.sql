SELECT partition, sequence FROM rheo_events WHERE stream = ?1 AND id = ?2
