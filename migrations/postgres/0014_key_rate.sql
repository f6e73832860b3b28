-- A group's flow.key_rate (docs/groups.md#flow): a token bucket per
-- (stream, group, partition, event key), kept as its theoretical arrival
-- time (tat, microseconds since the Unix epoch: rheo_core's policy::pace).
-- A key with no row has a full bucket, as has one whose tat is at or before
-- now: a fetch that stores tats deletes those of its partitions that have
-- passed (by rheo_key_rates_by_tat), and deleting or resetting a group
-- deletes its rows. Fetches of a key_rate group hold their cursor rows
-- (fetch_lock_cursors.sql) while they read and write these, so two fetches
-- never spend one token, on one server or on several.
CREATE TABLE rheo_key_rates (
    stream     text    NOT NULL,
    group_name text    NOT NULL,
    partition  integer NOT NULL,
    key        text    NOT NULL,
    tat        bigint  NOT NULL,
    PRIMARY KEY (stream, group_name, partition, key)
);

CREATE INDEX rheo_key_rates_by_tat ON rheo_key_rates (stream, group_name, partition, tat);

-- paced: true when a claim of this delivery found no token and it was
-- written available, due (available_at) at the slot its key's bucket
-- reserved for it; it then goes out when due without taking another token.
-- NULL otherwise (no default: a delivery that is never paced stores
-- nothing): a lease, a replay or a redrive clears it.
ALTER TABLE rheo_deliveries ADD COLUMN paced boolean;
