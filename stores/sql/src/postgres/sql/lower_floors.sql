-- After deliveries were re-opened (replay, redrive): no partition's floor may
-- stay above its lowest re-opened sequence. No filter on the old floor: the
-- row is always locked, so a fetch raising the floor meanwhile is waited for
-- and the LEAST is taken of what it wrote.
UPDATE rheo_group_partitions gp SET floor = LEAST(gp.floor, f.floor)
FROM unnest($3::int[], $4::bigint[]) AS f(partition, floor)
WHERE gp.stream = $1 AND gp.group_name = $2 AND gp.partition = f.partition
