-- The stored buckets (their TATs, docs/groups.md#flow) of these keys of one
-- partition of a key_rate group; a key without a row has a full bucket.
SELECT r.key, r.tat
FROM rheo_key_rates r
WHERE r.stream = $1 AND r.group_name = $2 AND r.partition = $3 AND r.key = ANY($4::text[])
