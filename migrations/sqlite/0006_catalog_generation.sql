-- The catalog generation (docs/operations.md#deleting-streams-and-groups):
-- a counter every delete of a stream or group bumps in its transaction.
-- The one server that owns this file learns of every delete as it makes
-- it, so it never reads the counter before a call (as servers sharing a
-- PostgreSQL database do); it takes the bumped value of its own deletes,
-- and the table keeps both dialects' schemas and migration numbers in step.

-- One row, always (id is 1).
CREATE TABLE rheo_catalog (
    id         INTEGER NOT NULL PRIMARY KEY CHECK (id = 1),
    generation INTEGER NOT NULL DEFAULT 0
) STRICT;

INSERT INTO rheo_catalog (id, generation) VALUES (1, 0);
