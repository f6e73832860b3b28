-- The stored buckets (their TATs, docs/groups.md#flow) of these keys of one
-- partition of a key_rate group; a key without a row has a full bucket.
SELECT k.value, r.tat
FROM json_each(?4) AS k
CROSS JOIN rheo_key_rates AS r
WHERE r.stream = ?1 AND r.group_name = ?2 AND r.partition = ?3 AND r.key = k.value
