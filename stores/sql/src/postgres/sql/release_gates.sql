-- After heads of a gated group were acked, dead-lettered, retried (and
-- parked) or trimmed away: each named (partition, gate) lets its lowest
-- parked deliveries through, as many as its slots ($3: one under an
-- ordering, key_concurrency under a flow) leave beside the heads it still
-- has, available or leased (docs/groups.md#ordering, docs/groups.md#flow).
-- The caller holds the partitions' cursor rows, so no fetch is leasing or
-- parking behind these gates meanwhile, and no other release is counting
-- the same heads.
--
-- A delivery picked here that another transaction has locked is skipped,
-- not waited for (and no higher one goes instead): what locks parked
-- deliveries before taking the cursor rows this transaction holds is a
-- replay (lifting their retry delay; it re-gates the partition once it has
-- the rows), a trim (removing them; it then releases their gates), or a
-- reset or a delete (removing every delivery of the partitions or group);
-- waiting for it would deadlock. Until that transaction has put the gate
-- right, the gate may be short of heads, or (with several slots) have a
-- head above the skipped delivery.
--
-- Each gate's parked deliveries are read from the lowest on, no further
-- than its free slots, and each one picked is locked by its key.
WITH asked AS (
    SELECT DISTINCT partition, gate FROM unnest($4::int[], $5::text[]) AS u(partition, gate)
), next AS (
    SELECT a.partition, p.sequence
    FROM asked a
    CROSS JOIN LATERAL (
        SELECT count(*) AS heads FROM rheo_deliveries h
        WHERE h.stream = $1 AND h.group_name = $2 AND h.partition = a.partition
          AND h.gate = a.gate AND h.gate IS NOT NULL
          AND h.status IN ('available', 'leased')
    ) h
    CROSS JOIN LATERAL (
        SELECT r.sequence FROM rheo_deliveries r
        WHERE r.stream = $1 AND r.group_name = $2 AND r.partition = a.partition
          AND r.gate = a.gate AND r.status = 'parked'
        ORDER BY r.sequence
        LIMIT greatest($3::bigint - h.heads, 0)
    ) p
), free AS (
    SELECT d.ctid FROM next n
    CROSS JOIN LATERAL (
        SELECT d.ctid FROM rheo_deliveries d
        WHERE d.stream = $1 AND d.group_name = $2
          AND d.partition = n.partition AND d.sequence = n.sequence
          AND d.status = 'parked'
        FOR UPDATE OF d SKIP LOCKED
    ) d
)
UPDATE rheo_deliveries d SET status = 'available'
WHERE d.ctid = ANY (ARRAY(SELECT ctid FROM free)) AND d.status = 'parked'
