-- Stream retention (docs/log.md#retention): a stream may keep only its
-- newest events, or those younger than an age, or those a group has not
-- settled yet; a trim removes the oldest events of a partition. Each
-- column has a constant default, so adding it rewrites no table.

-- The stream's retention as Retention::to_text writes it (JSON); NULL keeps
-- every event.
ALTER TABLE rheo_streams ADD COLUMN retention text;

-- The lowest sequence still stored in the partition: 1 until a trim
-- removes events, the high watermark + 1 once it removed them all. Every
-- event from here to the high watermark is stored.
ALTER TABLE rheo_partitions ADD COLUMN first_sequence bigint NOT NULL DEFAULT 1;

-- Per group and partition: the events a trim removed before the group
-- settled them (skipped_by_retention). A trim moves the group's cursor to
-- the new first sequence and deletes its deliveries below it, dead letters
-- excepted: those stay, keeping their event's id. It raises the scan floor
-- (0003) to the new first sequence too.
ALTER TABLE rheo_group_partitions ADD COLUMN skipped bigint NOT NULL DEFAULT 0;

-- Trims delete rows (events, deliveries); autovacuum gives their space
-- back to the tables for new rows.
