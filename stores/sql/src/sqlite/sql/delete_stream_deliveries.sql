-- Run twice, around delete_stream_cursors.sql: see delete_group_deliveries.sql.
DELETE FROM rheo_deliveries WHERE stream = ?1
