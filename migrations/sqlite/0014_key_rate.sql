-- A group's flow.key_rate (docs/groups.md#flow): a token bucket per
-- (stream, group, partition, event key), kept as its theoretical arrival
-- time (tat, microseconds since the Unix epoch: rheo_core's policy::pace).
-- A key with no row has a full bucket, as has one whose tat is at or before
-- now: a fetch that stores tats deletes those of its partitions that have
-- passed (by rheo_key_rates_by_tat), and deleting or resetting a group
-- deletes its rows. Fetches of a key_rate group hold their cursor rows
-- while they read and write these (SQLite: BEGIN IMMEDIATE).
CREATE TABLE rheo_key_rates (
    stream     TEXT    NOT NULL,
    group_name TEXT    NOT NULL,
    partition  INTEGER NOT NULL,
    key        TEXT    NOT NULL,
    tat        INTEGER NOT NULL,
    PRIMARY KEY (stream, group_name, partition, key)
) STRICT;

CREATE INDEX rheo_key_rates_by_tat ON rheo_key_rates (stream, group_name, partition, tat);

-- paced: 1 when a claim of this delivery found no token and it was written
-- available, due (available_at) at the slot its key's bucket reserved for
-- it; it then goes out when due without taking another token. NULL
-- otherwise: a lease, a replay or a redrive clears it.
ALTER TABLE rheo_deliveries ADD COLUMN paced INTEGER;
