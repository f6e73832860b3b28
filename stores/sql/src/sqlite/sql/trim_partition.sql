-- The partition's new log start: its first event kept (or the high
-- watermark + 1 when none is).
UPDATE rheo_partitions SET first_sequence = ?3 WHERE stream = ?1 AND partition = ?2
