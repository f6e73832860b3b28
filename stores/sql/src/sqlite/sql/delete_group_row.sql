DELETE FROM rheo_groups WHERE stream = ?1 AND name = ?2
