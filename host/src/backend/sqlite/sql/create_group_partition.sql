INSERT INTO rheo_group_partitions (stream, group_name, partition, cursor)
VALUES (?1, ?2, ?3, ?4)
