-- Before a fetch stores the TATs it changed (pace_store.sql): the buckets of
-- the same partitions whose TAT is at or before now (?3, microseconds) are
-- full, as if they had no row, and their rows go (docs/groups.md#flow).
-- ?4: the rows pace_store.sql takes (partition, key, tat).
DELETE FROM rheo_key_rates
WHERE stream = ?1 AND group_name = ?2
  AND partition IN (SELECT DISTINCT c.value ->> 0 FROM json_each(?4) AS c)
  AND tat <= ?3
