UPDATE rheo_group_partitions SET cursor = ?4
WHERE stream = ?1 AND group_name = ?2 AND partition = ?3
