-- Run twice, around the cursor rows' delete (delete_group_cursors.sql), in
-- the order fetches lock them: deliveries, then cursor rows. A fetch creates
-- deliveries only while it holds its cursor rows, so the first run waits for
-- fetches holding delivery rows, the cursor rows' delete for those holding
-- cursor rows, and the second run deletes what those created meanwhile. A
-- fetch that comes later finds no cursor row and creates nothing.
DELETE FROM rheo_deliveries WHERE stream = $1 AND group_name = $2
