DELETE FROM rheo_streams WHERE name = $1
