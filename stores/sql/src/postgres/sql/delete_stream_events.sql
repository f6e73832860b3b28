DELETE FROM rheo_events WHERE stream = $1
