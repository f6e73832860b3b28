-- Consumer groups and their per-event delivery state.
--
-- The frontier is not stored. Every sequence below a partition's cursor that
-- belongs to the group has a delivery row, and a sequence without one lies
-- before the group's start point; so the frontier is one less than the
-- lowest open delivery (or than the cursor when none is open), read with one
-- seek on rheo_deliveries_open.

-- One row per group: its retry policy.
CREATE TABLE rheo_groups (
    stream           TEXT    NOT NULL REFERENCES rheo_streams (name),
    name             TEXT    NOT NULL,
    max_attempts     INTEGER NOT NULL CHECK (max_attempts >= 1),
    retry_backoff_ms TEXT    NOT NULL,  -- JSON array of milliseconds
    created_at       TEXT    NOT NULL,
    PRIMARY KEY (stream, name)
) STRICT;

-- Per group and partition: the cursor, i.e. the next sequence the group has
-- never handed out. Deliveries are created lazily when a fetch passes it.
CREATE TABLE rheo_group_partitions (
    stream     TEXT    NOT NULL,
    group_name TEXT    NOT NULL,
    partition  INTEGER NOT NULL,
    cursor     INTEGER NOT NULL,
    PRIMARY KEY (stream, group_name, partition),
    FOREIGN KEY (stream, group_name) REFERENCES rheo_groups (stream, name)
) STRICT;

-- One row per (group, event) the group has reached.
-- status: available | leased | acked | dead. Every lease mutation is one
-- conditional UPDATE on (status = 'leased', lease_id).
CREATE TABLE rheo_deliveries (
    stream           TEXT    NOT NULL,
    group_name       TEXT    NOT NULL,
    partition        INTEGER NOT NULL,
    sequence         INTEGER NOT NULL,
    event_id         TEXT    NOT NULL,
    status           TEXT    NOT NULL,
    attempt          INTEGER NOT NULL DEFAULT 0,  -- claims so far
    available_at     TEXT,  -- an available delivery is due from then (NULL: now)
    lease_id         TEXT,  -- the fencing token while leased
    consumer_id      TEXT,
    leased_at        TEXT,
    expires_at       TEXT,
    reason           TEXT,  -- last nack or dead-letter reason
    dead_lettered_at TEXT,
    PRIMARY KEY (stream, group_name, partition, sequence)
) STRICT;

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
