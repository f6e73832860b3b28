-- Every group's cursor in the partition (no row locks: BEGIN IMMEDIATE
-- already serializes every fetch).
SELECT group_name, cursor FROM rheo_group_partitions
WHERE stream = ?1 AND partition = ?2
ORDER BY group_name
