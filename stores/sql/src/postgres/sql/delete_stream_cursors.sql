DELETE FROM rheo_group_partitions WHERE stream = $1
