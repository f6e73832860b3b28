-- Stream retention (docs/log.md#retention): a stream may keep only its
-- newest events, or those younger than an age, or those a group has not
-- settled yet; a trim removes the oldest events of a partition.

-- The stream's retention as Retention::to_text writes it (JSON); NULL keeps
-- every event.
ALTER TABLE rheo_streams ADD COLUMN retention TEXT;

-- The lowest sequence still stored in the partition: 1 until a trim
-- removes events, the high watermark + 1 once it removed them all. Every
-- event from here to the high watermark is stored.
ALTER TABLE rheo_partitions ADD COLUMN first_sequence INTEGER NOT NULL DEFAULT 1;

-- Per group and partition: the events a trim removed before the group
-- settled them (skipped_by_retention). A trim moves the group's cursor to
-- the new first sequence and deletes its deliveries below it, dead letters
-- excepted: those stay, keeping their event's id.
ALTER TABLE rheo_group_partitions ADD COLUMN skipped INTEGER NOT NULL DEFAULT 0;

-- Space: a store created by this version has auto_vacuum = INCREMENTAL (set
-- on the writer connection before its first table), so the pages trims free
-- are given back to the filesystem by the backend's reclaim
-- (PRAGMA incremental_vacuum). A store created before keeps its mode, and
-- reuses freed pages for new rows; `PRAGMA auto_vacuum = INCREMENTAL;
-- VACUUM;` (with the server stopped) switches it (docs/log.md#retention).
