DELETE FROM rheo_groups WHERE stream = ?1
