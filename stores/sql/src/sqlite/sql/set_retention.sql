-- A stream's retention (docs/log.md#retention): ?2 is its JSON text, NULL
-- to keep every event. No row: no such stream.
UPDATE rheo_streams SET retention = ?2 WHERE name = ?1
RETURNING partition_count, created_at
