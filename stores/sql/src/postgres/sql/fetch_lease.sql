-- The second half of the fetch of a group without gates, in one round trip
-- (docs/benchmarks.md#postgresql-round-trips-and-plans): what fetch_claim,
-- fetch_materialize, advance_cursors and events_at do. The rows ($1…$4)
-- are by kind: 0 a claimable delivery to lease again, 1 a new delivery to
-- create, leased (each with its lease id), 2 a partition's cursor to move
-- (the new cursor in the sequence column). Returns each lease's event
-- (the columns of events_at), then its attempt and lease id. Events are
-- read by key, one lateral lookup per lease (OFFSET 0 keeps each one from
-- being merged into a join the planner might drive from another index).
--
-- Re-claims are few (expired leases, retries): their count gates the
-- update, which reads nothing when there is none.
--
-- The statement's snapshot has no new delivery in it, so each floor is the
-- lowest of the open deliveries it sees (re-claimed ones stay open), the
-- parked ones, and the new ones; the cursor when there is none.
WITH input AS (
    SELECT * FROM unnest($1::int[], $2::int[], $3::bigint[], $4::text[])
        AS i(kind, partition, sequence, lease_id)
),
reclaimed AS (
    UPDATE rheo_deliveries d
    SET status = 'leased', attempt = d.attempt + 1, lease_id = i.lease_id, consumer_id = $7,
        leased_at = $8, expires_at = $9, available_at = NULL
    FROM input i
    WHERE (SELECT count(*) > 0 FROM input WHERE kind = 0)
      AND i.kind = 0 AND d.stream = $5 AND d.group_name = $6
      AND d.partition = i.partition AND d.sequence = i.sequence
    RETURNING d.partition, d.sequence, d.attempt, d.lease_id
),
created AS (
    INSERT INTO rheo_deliveries
        (stream, group_name, partition, sequence, event_id, status, attempt,
         lease_id, consumer_id, leased_at, expires_at, gate)
    SELECT $5, $6, i.partition, i.sequence, e.id, 'leased', 1, i.lease_id, $7, $8, $9,
           CASE $10::text WHEN 'key' THEN e.key WHEN 'partition' THEN '' END
    FROM input i
    CROSS JOIN LATERAL (
        SELECT e.id, e.key FROM rheo_events e
        WHERE e.stream = $5 AND e.partition = i.partition AND e.sequence = i.sequence
        OFFSET 0
    ) e
    WHERE i.kind = 1
    RETURNING partition, sequence, attempt, lease_id
),
next AS (
    SELECT gp.partition, c.sequence AS cursor,
           COALESCE(LEAST((SELECT d.sequence FROM rheo_deliveries d
                           WHERE d.stream = gp.stream AND d.group_name = gp.group_name
                             AND d.partition = gp.partition AND d.sequence >= gp.floor
                             AND d.status IN ('available', 'leased')
                           ORDER BY d.sequence
                           LIMIT 1),
                          (SELECT d.sequence FROM rheo_deliveries d
                           WHERE d.stream = gp.stream AND d.group_name = gp.group_name
                             AND d.partition = gp.partition AND d.sequence >= gp.floor
                             AND d.status = 'parked'
                           ORDER BY d.sequence
                           LIMIT 1),
                          (SELECT min(f.sequence) FROM input f
                           WHERE f.kind = 1 AND f.partition = gp.partition)),
                    c.sequence) AS floor
    FROM rheo_group_partitions gp
    JOIN input c ON c.kind = 2 AND c.partition = gp.partition
    WHERE gp.stream = $5 AND gp.group_name = $6
),
moved AS (
    UPDATE rheo_group_partitions gp SET cursor = n.cursor, floor = n.floor
    FROM next n
    WHERE gp.stream = $5 AND gp.group_name = $6 AND gp.partition = n.partition
      AND (gp.cursor, gp.floor) IS DISTINCT FROM (n.cursor, n.floor)
),
leased AS (
    SELECT * FROM reclaimed
    UNION ALL
    SELECT * FROM created
)
SELECT l.partition, l.sequence, e.id, e.key, e.type, e.ts, e.payload, e.metadata,
       l.attempt, l.lease_id
FROM leased l
CROSS JOIN LATERAL (
    SELECT e.id, e.key, e.type, e.ts, e.payload, e.metadata FROM rheo_events e
    WHERE e.stream = $5 AND e.partition = l.partition AND e.sequence = l.sequence
    OFFSET 0
) e
