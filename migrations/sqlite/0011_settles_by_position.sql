-- Settles and fences reach a delivery by its position
-- (docs/backends.md#sql-backends): each event id is looked up in the log
-- (rheo_events_by_id), then the delivery by its primary key. The unique
-- index on (stream, group, event id) was there only for those lookups, and
-- every new delivery paid an entry in it: 14% of a fetch's insert, 20% of
-- its commit's pages, measured on a batch of 50 (docs/benchmarks.md). A dead
-- letter outlives its event once retention removes it, so dead letters keep
-- an index by event id: the dead-letter page cursor and redrives name them
-- by it.
DROP INDEX rheo_deliveries_by_event;
CREATE INDEX rheo_deliveries_dead_by_event ON rheo_deliveries (stream, group_name, event_id)
    WHERE status = 'dead';
