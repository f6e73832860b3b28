INSERT INTO rheo_group_partitions (stream, group_name, partition, cursor)
SELECT $1, $2, p.partition, p.cursor
FROM unnest($3::int[], $4::bigint[]) AS p(partition, cursor)
