-- A new group's cursor rows: each partition's cursor, and the sequence the
-- group starts after (migrations/postgres/0009_first_acks_leave_no_row.sql).
INSERT INTO rheo_group_partitions (stream, group_name, partition, cursor, started_after)
SELECT $1, $2, p.partition, p.cursor, p.cursor - 1
FROM unnest($3::int[], $4::bigint[]) AS p(partition, cursor)
