DELETE FROM rheo_group_partitions WHERE stream = ?1 AND group_name = ?2
