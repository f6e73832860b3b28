-- Whether the stream exists (BEGIN IMMEDIATE already keeps every other
-- write out).
SELECT 1 FROM rheo_streams WHERE name = ?1
