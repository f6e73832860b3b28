-- The TATs a fetch of a key_rate group changed (docs/groups.md#flow), rows
-- (partition, key, tat), written under the cursor rows it holds. ?3 (now,
-- microseconds) is pace_sweep.sql's, run just before.
INSERT INTO rheo_key_rates (stream, group_name, partition, key, tat)
SELECT ?1, ?2, c.value ->> 0, c.value ->> 1, c.value ->> 2
FROM json_each(?4) AS c
WHERE true
ON CONFLICT (stream, group_name, partition, key) DO UPDATE SET tat = excluded.tat
