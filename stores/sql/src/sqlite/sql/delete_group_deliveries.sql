-- Run twice, around delete_group_cursors.sql (which matters where rows are
-- locked: see the PostgreSQL statement; the second run finds nothing here).
DELETE FROM rheo_deliveries WHERE stream = ?1 AND group_name = ?2
