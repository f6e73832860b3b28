-- Streams and their events.
--
-- Timestamps are RFC 3339 UTC text with exactly three fractional digits
-- (2026-11-29T08:25:16.123Z): fixed width, so text order is time order.
-- Payloads and metadata are JSON text, queryable with json_extract().

-- One row per stream. partition_count is fixed at creation.
CREATE TABLE rheo_streams (
    name            TEXT    NOT NULL PRIMARY KEY,
    partition_count INTEGER NOT NULL CHECK (partition_count >= 1),
    created_at      TEXT    NOT NULL
) STRICT;

-- The sequence allocator: the last sequence appended to each partition.
-- Bumped and read back in the same transaction that inserts the events.
CREATE TABLE rheo_partitions (
    stream         TEXT    NOT NULL REFERENCES rheo_streams (name),
    partition      INTEGER NOT NULL,
    high_watermark INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (stream, partition)
) STRICT;

-- Immutable events. (stream, partition, sequence) is the position; id is
-- unique per stream and makes appends idempotent.
CREATE TABLE rheo_events (
    stream    TEXT    NOT NULL,
    partition INTEGER NOT NULL,
    sequence  INTEGER NOT NULL,
    id        TEXT    NOT NULL,
    key       TEXT,
    type      TEXT,
    ts        TEXT    NOT NULL,
    payload   TEXT    NOT NULL,
    metadata  TEXT    NOT NULL,
    PRIMARY KEY (stream, partition, sequence)
) STRICT;

-- Idempotent append and settles/replays by event id.
CREATE UNIQUE INDEX rheo_events_by_id ON rheo_events (stream, id);
-- Queries ordered by sequence across partitions.
CREATE INDEX rheo_events_by_sequence ON rheo_events (stream, sequence, partition);
-- Time bounds, ordering by timestamp, start_at and replay from a time.
CREATE INDEX rheo_events_by_ts ON rheo_events (stream, ts, partition, sequence);
-- The common filters: type, key and the lineage keys.
CREATE INDEX rheo_events_by_type ON rheo_events (stream, type, sequence);
CREATE INDEX rheo_events_by_key ON rheo_events (stream, key, sequence);
CREATE INDEX rheo_events_by_correlation
    ON rheo_events (stream, json_extract(metadata, '$.correlation_id'));
CREATE INDEX rheo_events_by_causation
    ON rheo_events (stream, json_extract(metadata, '$.causation_id'));
