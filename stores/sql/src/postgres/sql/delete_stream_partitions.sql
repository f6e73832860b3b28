-- Deleted before the events: the allocator rows are what an append locks
-- (append_lock_partitions.sql), so an append under way commits first and one
-- that comes later finds no partition to write to.
DELETE FROM rheo_partitions WHERE stream = $1
