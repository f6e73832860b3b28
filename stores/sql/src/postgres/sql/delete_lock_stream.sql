-- A stream's delete starts here (docs/operations.md#deleting-streams-and-groups):
-- its row, held until the delete commits, keeps new groups out
-- (lock_stream.sql) and says whether the stream exists.
SELECT 1 FROM rheo_streams WHERE name = $1 FOR UPDATE
