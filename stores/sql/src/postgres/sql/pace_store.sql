-- The TATs a fetch of a key_rate group changed (docs/groups.md#flow), rows
-- ($4, $5, $6): (partition, key, tat), written under the cursor rows it
-- holds. The buckets of the same partitions whose TAT is at or before now
-- ($3, microseconds) are full, as if they had no row: their rows go (those
-- written here excepted, which one statement must not touch twice).
WITH swept AS (
    DELETE FROM rheo_key_rates r
    WHERE r.stream = $1 AND r.group_name = $2
      AND r.partition = ANY(ARRAY(SELECT DISTINCT unnest($4::int[])))
      AND r.tat <= $3
      AND NOT EXISTS (SELECT 1 FROM unnest($4::int[], $5::text[]) AS c(partition, key)
                      WHERE c.partition = r.partition AND c.key = r.key)
)
INSERT INTO rheo_key_rates (stream, group_name, partition, key, tat)
SELECT $1, $2, c.partition, c.key, c.tat
FROM unnest($4::int[], $5::text[], $6::bigint[]) AS c(partition, key, tat)
ON CONFLICT (stream, group_name, partition, key) DO UPDATE SET tat = excluded.tat
