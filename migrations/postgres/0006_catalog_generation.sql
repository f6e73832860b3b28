-- The catalog generation (docs/operations.md#deleting-streams-and-groups):
-- a counter every delete of a stream or group bumps in its transaction.
-- Each server keeps the streams' partition counts and the groups' settings
-- it has read; one sharing this database reads the counter at most every
-- second before it trusts what it keeps, and forgets everything when the
-- counter moved, so a stream or group deleted through another server is not
-- served from memory for long.

-- One row, always (id is true).
CREATE TABLE rheo_catalog (
    id         boolean NOT NULL PRIMARY KEY DEFAULT true CHECK (id),
    generation bigint  NOT NULL DEFAULT 0
);

INSERT INTO rheo_catalog (id, generation) VALUES (true, 0);
