-- A new group's cursor rows: each partition's cursor, and the sequence the
-- group starts after (migrations/sqlite/0009_first_acks_leave_no_row.sql).
INSERT INTO rheo_group_partitions (stream, group_name, partition, cursor, started_after)
SELECT ?1, ?2, r.value ->> 0, r.value ->> 1, (r.value ->> 1) - 1 FROM json_each(?3) AS r
