DELETE FROM rheo_key_rates WHERE stream = ?1
