-- No row lock: BEGIN IMMEDIATE already keeps every delete out.
SELECT partition_count, created_at FROM rheo_streams WHERE name = ?1
