INSERT INTO rheo_events (stream, partition, sequence, id, key, type, ts, payload, metadata)
VALUES {rows}
