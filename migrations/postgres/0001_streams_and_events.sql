-- Streams and their events.
--
-- Timestamps are timestamptz at millisecond precision. Payloads and
-- metadata are jsonb, so the log can be queried in plain SQL
-- (payload ->> 'currency', metadata @> '{"producer": "billing"}', …).
-- Tables are created unqualified: they land in the first schema of the
-- search_path, which Rheo sets when it is given a schema.

-- One row per stream. partition_count is fixed at creation.
CREATE TABLE rheo_streams (
    name            text        NOT NULL PRIMARY KEY,
    partition_count integer     NOT NULL CHECK (partition_count >= 1),
    created_at      timestamptz NOT NULL
);

-- The sequence allocator: the last sequence appended to each partition.
-- An append bumps it with UPDATE … RETURNING, whose row lock also orders
-- concurrent appends to one partition, so sequences commit in order.
CREATE TABLE rheo_partitions (
    stream         text    NOT NULL REFERENCES rheo_streams (name),
    partition      integer NOT NULL,
    high_watermark bigint  NOT NULL DEFAULT 0,
    PRIMARY KEY (stream, partition)
);

-- Immutable events. (stream, partition, sequence) is the position; id is
-- unique per stream and makes appends idempotent.
CREATE TABLE rheo_events (
    stream    text        NOT NULL,
    partition integer     NOT NULL,
    sequence  bigint      NOT NULL,
    id        text        NOT NULL,
    key       text,
    type      text,
    ts        timestamptz NOT NULL,
    payload   jsonb       NOT NULL,
    metadata  jsonb       NOT NULL,
    PRIMARY KEY (stream, partition, sequence)
);

-- Idempotent append and settles/replays by event id.
CREATE UNIQUE INDEX rheo_events_by_id ON rheo_events (stream, id);
-- Queries ordered by sequence across partitions.
CREATE INDEX rheo_events_by_sequence ON rheo_events (stream, sequence, partition);
-- Time bounds, ordering by timestamp, start_at and replay from a time.
CREATE INDEX rheo_events_by_ts ON rheo_events (stream, ts, partition, sequence);
-- The common filters: type, key and the lineage keys.
CREATE INDEX rheo_events_by_type ON rheo_events (stream, type, sequence);
CREATE INDEX rheo_events_by_key ON rheo_events (stream, key, sequence);
CREATE INDEX rheo_events_by_correlation ON rheo_events (stream, (metadata -> 'correlation_id'));
CREATE INDEX rheo_events_by_causation ON rheo_events (stream, (metadata -> 'causation_id'));
