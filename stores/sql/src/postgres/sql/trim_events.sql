-- The removed events (sequences $3 to $4, exclusive) and, once vacuumed,
-- their entries in every index: by id, by time, by type, by key, by lineage.
DELETE FROM rheo_events WHERE stream = $1 AND partition = $2 AND sequence >= $3 AND sequence < $4
