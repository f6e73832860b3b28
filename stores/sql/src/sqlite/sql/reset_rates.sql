-- A reset forgets the key_rate buckets of the partitions it resets
-- (docs/groups.md#flow): they start full.
DELETE FROM rheo_key_rates
WHERE stream = ?1 AND group_name = ?2 AND partition IN (SELECT value FROM json_each(?3))
