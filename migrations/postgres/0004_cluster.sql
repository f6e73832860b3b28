-- A cluster of Rheo servers sharing this database (docs/cluster.md):
-- who is up, the handlers every one of them runs, and those handlers'
-- modules. PostgreSQL's alone: the embedded SQLite store has one server.

-- One row per live server, refreshed by its heartbeat and deleted when it
-- leaves. handlers: what it runs, as [{name, version, digest, status}].
CREATE TABLE rheo_nodes (
    id           text        NOT NULL PRIMARY KEY,
    address      text        NOT NULL,
    version      text        NOT NULL,
    started_at   timestamptz NOT NULL,
    heartbeat_at timestamptz NOT NULL,
    handlers     jsonb       NOT NULL DEFAULT '[]'
);

-- WebAssembly modules by content digest (sha256 hex), written once.
CREATE TABLE rheo_modules (
    digest     text        NOT NULL PRIMARY KEY,
    bytes      bytea       NOT NULL,
    stored_at  timestamptz NOT NULL
);

-- One record per handler: what every server runs for it (manifest,
-- current and previous version by number and digest, paused), as a
-- document the servers write with compare-and-set on revision.
CREATE TABLE rheo_handlers (
    name     text   NOT NULL PRIMARY KEY,
    revision bigint NOT NULL CHECK (revision >= 1),
    doc      jsonb  NOT NULL
);
