-- The partition's first stored sequence and its high watermark, its
-- allocator row held until the trim commits: appends to this partition
-- (append_lock_partitions.sql) wait for one bounded trim, others do not, and
-- two trims of the partition never remove the same events.
SELECT first_sequence, high_watermark FROM rheo_partitions
WHERE stream = $1 AND partition = $2
FOR NO KEY UPDATE
