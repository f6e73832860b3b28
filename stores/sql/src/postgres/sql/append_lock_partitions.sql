-- Locks the allocator rows of an append in partition order, so concurrent
-- appends to several partitions cannot deadlock.
SELECT 1 FROM rheo_partitions WHERE stream = $1 AND partition = ANY($2)
ORDER BY partition FOR UPDATE
