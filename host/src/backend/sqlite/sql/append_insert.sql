INSERT INTO rheo_events (stream, partition, sequence, id, key, type, ts, payload, metadata)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)
