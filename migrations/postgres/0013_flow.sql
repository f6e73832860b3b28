-- A group's flow control (docs/groups.md#flow), as Flow::to_json writes it:
-- '{}' when every limit is off. Under {"key_concurrency": N} (with ordering
-- 'none') every delivery of a keyed event has its key as its gate (the
-- gate column of 0005_ordering.sql), and a gate has at most N deliveries
-- available or leased, its heads; the others are parked.
ALTER TABLE rheo_groups ADD COLUMN flow text NOT NULL DEFAULT '{}';
