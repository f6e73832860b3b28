-- A write that adds rows under a stream it read afresh (a new group): the
-- stream's row, held against a delete of the stream (delete_lock_stream.sql)
-- until the transaction ends.
SELECT partition_count, created_at FROM rheo_streams WHERE name = $1 FOR KEY SHARE
