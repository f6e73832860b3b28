-- Scan floors: open deliveries are found from a stored lower bound, never by
-- walking a group's history.
--
-- An UPDATE in PostgreSQL leaves the row's old index entries behind until
-- VACUUM removes them. Every delivery passes through rheo_deliveries_open
-- (available, leased) on its way to acked, so without a vacuum the front of
-- that index fills with dead entries, and a scan in sequence order from the
-- group's start would step over all of them: fetch, the poison guard and the
-- frontier would cost more with every event ever consumed.

-- floor: no open (available or leased) delivery of this group and partition
-- has a lower sequence. Fetches raise it to the lowest open delivery while
-- they hold the row; whatever re-opens a delivery (replay, redrive, reset)
-- lowers it in the same transaction. 0 is always a correct floor.
ALTER TABLE rheo_group_partitions ADD COLUMN floor bigint NOT NULL DEFAULT 0;

-- Lease expiries and retry due times are now read from the open deliveries
-- above the floor, so these indexes (ordered by time, where no floor applies,
-- and written on every claim and nack) are gone.
DROP INDEX rheo_deliveries_leased;
DROP INDEX rheo_deliveries_due;

-- A delivery has a lease id exactly while it is leased, so the batch ack can
-- fence on the lease id alone (see settle_acks.sql).
ALTER TABLE rheo_deliveries ADD CONSTRAINT rheo_deliveries_lease_id_while_leased
    CHECK ((status = 'leased') = (lease_id IS NOT NULL));
