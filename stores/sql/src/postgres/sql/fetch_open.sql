-- The first half of the fetch of a group without gates (no ordering, no
-- key_concurrency), in one round trip
-- (docs/benchmarks.md#postgresql-round-trips-and-plans): what fetch_poison,
-- fetch_candidates and fetch_lock_cursors do, in their lock order —
-- delivery rows first, then the cursor rows in partition order.
--
-- Rows by kind: 0 a delivery just dead-lettered (partition, gate in text);
-- 1 a claimable delivery (partition, sequence in a), locked, rows other
-- fetchers hold skipped; 2 a cursor row, locked (partition, cursor in a,
-- high watermark in b, the group's ordering in text, its flow in flow: the
-- caller checks they still give no gate). A lease expired on its last
-- attempt is the poison guard's, never a candidate: one statement must not
-- write a row twice. Nearly always none is: the count gates the
-- update, which then reads nothing at all (a plan cached while the table
-- looked small reaches the rows by scanning it, not by their ctid).
WITH doomed AS (
    SELECT d.ctid
    FROM rheo_group_partitions gp
    CROSS JOIN LATERAL (
        SELECT r.ctid FROM rheo_deliveries r
        WHERE r.stream = gp.stream AND r.group_name = gp.group_name
          AND r.partition = gp.partition AND r.sequence >= gp.floor
          AND r.status IN ('available', 'leased')
          AND r.status = 'leased' AND r.expires_at <= $4 AND r.attempt >= $6
        FOR UPDATE OF r SKIP LOCKED
    ) d
    WHERE gp.stream = $1 AND gp.group_name = $2 AND gp.partition = ANY($3)
),
poisoned AS (
    UPDATE rheo_deliveries d
    SET status = 'dead', reason = $7, dead_lettered_at = $4,
        lease_id = NULL, available_at = NULL
    WHERE (SELECT count(*) > 0 FROM doomed) AND d.ctid = ANY (ARRAY(SELECT ctid FROM doomed))
    RETURNING d.partition, d.gate
),
candidates AS (
    SELECT c.partition, c.sequence
    FROM rheo_group_partitions gp
    CROSS JOIN LATERAL (
        SELECT d.partition, d.sequence FROM rheo_deliveries d
        WHERE d.stream = gp.stream AND d.group_name = gp.group_name
          AND d.partition = gp.partition AND d.sequence >= gp.floor
          AND d.status IN ('available', 'leased')
          AND ((d.status = 'available' AND (d.available_at IS NULL OR d.available_at <= $4))
               OR (d.status = 'leased' AND d.expires_at <= $4 AND d.attempt < $6))
        ORDER BY d.sequence
        LIMIT $5
        FOR UPDATE OF d SKIP LOCKED
    ) c
    WHERE gp.stream = $1 AND gp.group_name = $2 AND gp.partition = ANY($3)
),
cursors AS (
    SELECT gp.partition, gp.cursor, p.high_watermark, gr.ordering, gr.flow
    FROM rheo_group_partitions gp
    JOIN rheo_partitions p ON p.stream = gp.stream AND p.partition = gp.partition
    JOIN rheo_groups gr ON gr.stream = gp.stream AND gr.name = gp.group_name
    WHERE gp.stream = $1 AND gp.group_name = $2 AND gp.partition = ANY($3)
    ORDER BY gp.partition
    FOR UPDATE OF gp
)
SELECT 0 AS kind, partition, NULL::bigint AS a, NULL::bigint AS b, gate AS text,
       NULL::text AS flow FROM poisoned
UNION ALL
SELECT 1, partition, sequence, NULL, NULL, NULL FROM candidates
UNION ALL
SELECT 2, partition, cursor, high_watermark, ordering, flow FROM cursors
