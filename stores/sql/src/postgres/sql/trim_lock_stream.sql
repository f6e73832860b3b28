-- A trim starts here (docs/log.md#retention): the stream's row, held until
-- the trim commits, keeps a new group (lock_stream.sql, which a trim's
-- FOR UPDATE waits for and holds back) from choosing its start from a log
-- start the trim is moving, and a delete of the stream out. Appends and
-- fetches never lock it.
SELECT partition_count, created_at FROM rheo_streams WHERE name = $1 FOR UPDATE
