-- The second half of the fetch of a group without gates, in one call on the
-- connection's thread (docs/benchmarks.md#sqlite-calls-on-the-writers-thread):
-- what fetch_claim, fetch_materialize, advance_cursors and events_at do, one
-- statement after the other. The rows (?1, [kind, partition, sequence, lease
-- id]) are by kind, the same as PostgreSQL's: 0 a claimable delivery to
-- lease again, 1 a new delivery to create, leased, 2 a partition's cursor to
-- move (the new cursor in the sequence column). Returns each lease's event
-- (the columns of events_at), then its attempt and lease id: a lease whose
-- row does not carry its new lease id is not returned. Every row is reached
-- by key (CROSS JOIN fixes the join order; the rowid subqueries keep the
-- planner from walking a group's deliveries).
UPDATE rheo_deliveries AS d
SET status = 'leased', attempt = d.attempt + 1, lease_id = c.value ->> 3, consumer_id = ?4,
    leased_at = ?5, expires_at = ?6, available_at = NULL
FROM json_each(?1) AS c
WHERE c.value ->> 0 = 0
  AND d.rowid = (SELECT r.rowid FROM rheo_deliveries AS r
                 WHERE r.stream = ?2 AND r.group_name = ?3
                   AND r.partition = c.value ->> 1 AND r.sequence = c.value ->> 2);
INSERT INTO rheo_deliveries
    (stream, group_name, partition, sequence, event_id, status, attempt,
     lease_id, consumer_id, leased_at, expires_at, gate)
SELECT ?2, ?3, e.partition, e.sequence, e.id, 'leased', 1, m.value ->> 3, ?4, ?5, ?6,
       CASE ?7 WHEN 'key' THEN e.key WHEN 'partition' THEN '' END
FROM json_each(?1) AS m
CROSS JOIN rheo_events AS e
WHERE m.value ->> 0 = 1
  AND e.stream = ?2 AND e.partition = m.value ->> 1 AND e.sequence = m.value ->> 2;
UPDATE rheo_group_partitions SET cursor = c.value ->> 2
FROM json_each(?1) AS c
WHERE c.value ->> 0 = 2
  AND rheo_group_partitions.rowid = (
        SELECT gp.rowid FROM rheo_group_partitions AS gp
        WHERE gp.stream = ?2 AND gp.group_name = ?3 AND gp.partition = c.value ->> 1)
  AND cursor <> c.value ->> 2;
SELECT e.partition, e.sequence, e.id, e.key, e.type, e.ts, e.payload, e.metadata,
       d.attempt, d.lease_id
FROM json_each(?1) AS l
CROSS JOIN rheo_events AS e
CROSS JOIN rheo_deliveries AS d
WHERE l.value ->> 0 IN (0, 1)
  AND e.stream = ?2 AND e.partition = l.value ->> 1 AND e.sequence = l.value ->> 2
  AND d.stream = ?2 AND d.group_name = ?3 AND d.partition = e.partition
  AND d.sequence = e.sequence AND d.lease_id = l.value ->> 3
