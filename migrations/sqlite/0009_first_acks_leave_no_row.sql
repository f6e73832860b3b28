-- An ack on a delivery's first attempt deletes its row instead of keeping
-- it as 'acked' (docs/backends.md#sql-backends): the deliveries table holds
-- what is open, dead or was claimed more than once, not one row per event
-- and group for ever.
--
-- What a missing row below a partition's cursor means then depends on where
-- the group started: at or before `started_after` (set by the group's
-- creation and by each reset), an event the group never reached; after
-- it, one acked on its first attempt. A replay re-opens the first as never
-- delivered (attempt 0) and the second on attempt 1, so that its next claim
-- is attempt 2 (docs/groups.md#replay-and-reset). A delivery at or before
-- `started_after` keeps its 'acked' row: without one, it would read as
-- never delivered.
--
-- Existing groups start after their cursor: every delivery below it keeps
-- its row, as before. The acks themselves are settle_acks_forget.sql, then
-- settle_acks.sql (stores/sql/src/sqlite/sql/).
ALTER TABLE rheo_group_partitions ADD COLUMN started_after INTEGER NOT NULL DEFAULT 0;
UPDATE rheo_group_partitions SET started_after = cursor - 1;
