-- Consumer groups and their per-event delivery state.
--
-- The frontier is not stored. Every sequence below a partition's cursor that
-- belongs to the group has a delivery row, and a sequence without one lies
-- before the group's start point; so the frontier is one less than the
-- lowest open delivery (or than the cursor when none is open), read with one
-- seek on rheo_deliveries_open. Settles therefore never lock a shared row.

-- One row per group: its retry policy.
CREATE TABLE rheo_groups (
    stream           text        NOT NULL REFERENCES rheo_streams (name),
    name             text        NOT NULL,
    max_attempts     integer     NOT NULL CHECK (max_attempts >= 1),
    retry_backoff_ms bigint[]    NOT NULL,
    created_at       timestamptz NOT NULL,
    PRIMARY KEY (stream, name)
);

-- Per group and partition: the cursor, i.e. the next sequence the group has
-- never handed out. A fetch that creates deliveries past it locks this row,
-- so concurrent fetchers (on any node) never create the same delivery twice.
CREATE TABLE rheo_group_partitions (
    stream     text    NOT NULL,
    group_name text    NOT NULL,
    partition  integer NOT NULL,
    cursor     bigint  NOT NULL,
    PRIMARY KEY (stream, group_name, partition),
    FOREIGN KEY (stream, group_name) REFERENCES rheo_groups (stream, name)
);

-- One row per (group, event) the group has reached.
-- status: available | leased | acked | dead. Claims take rows with
-- FOR UPDATE SKIP LOCKED; every settle is one conditional UPDATE on
-- (status = 'leased', lease_id).
CREATE TABLE rheo_deliveries (
    stream           text        NOT NULL,
    group_name       text        NOT NULL,
    partition        integer     NOT NULL,
    sequence         bigint      NOT NULL,
    event_id         text        NOT NULL,
    status           text        NOT NULL,
    attempt          integer     NOT NULL DEFAULT 0,  -- claims so far
    available_at     timestamptz,  -- an available delivery is due from then (NULL: now)
    lease_id         text,         -- the fencing token while leased
    consumer_id      text,
    leased_at        timestamptz,
    expires_at       timestamptz,
    reason           text,         -- last nack or dead-letter reason
    dead_lettered_at timestamptz,
    PRIMARY KEY (stream, group_name, partition, sequence)
);

-- Settles name the event id.
CREATE UNIQUE INDEX rheo_deliveries_by_event ON rheo_deliveries (stream, group_name, event_id);
-- Claims in sequence order, and the frontier (lowest open sequence).
CREATE INDEX rheo_deliveries_open ON rheo_deliveries (stream, group_name, partition, sequence)
    WHERE status IN ('available', 'leased');
-- Lease expiry: the poison guard and the next wake-up time.
CREATE INDEX rheo_deliveries_leased ON rheo_deliveries (stream, group_name, expires_at)
    WHERE status = 'leased';
-- Retry due times.
CREATE INDEX rheo_deliveries_due ON rheo_deliveries (stream, group_name, available_at)
    WHERE status = 'available';
-- Dead letters in listing order.
CREATE INDEX rheo_deliveries_dead ON rheo_deliveries (stream, group_name, sequence, partition)
    WHERE status = 'dead';
