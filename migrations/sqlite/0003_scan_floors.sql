-- Scan floors (PostgreSQL only).
--
-- The PostgreSQL migration of the same number adds a per-partition lower
-- bound for scans of open deliveries, because PostgreSQL keeps the index
-- entries of updated rows until VACUUM and a scan from a group's start would
-- step over every delivery ever acked. SQLite removes a row's entry from a
-- partial index in the same statement that updates the row out of it, so its
-- rheo_deliveries_open index holds open deliveries only and needs no floor.
-- Nothing changes here; the file keeps both dialects' migration numbers in step.
SELECT 1;
