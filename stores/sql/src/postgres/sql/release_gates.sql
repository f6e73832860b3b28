-- After heads of an ordered group were acked or dead-lettered: each named
-- (partition, gate) left with no head lets its lowest parked delivery
-- through (docs/groups.md#ordering). The caller holds the partitions' cursor
-- rows, so no fetch is parking behind these gates meanwhile.
--
-- A lowest parked delivery another transaction has locked is skipped, not
-- waited for (and no higher one goes instead): only a replay or a redrive
-- locks parked deliveries, and it re-gates the partition once it holds the
-- cursor rows this transaction holds; waiting for it would deadlock.
WITH next AS (
    SELECT g.partition, (
        SELECT r.sequence FROM rheo_deliveries r
        WHERE r.stream = $1 AND r.group_name = $2 AND r.partition = g.partition
          AND r.gate = g.gate AND r.status = 'parked'
        ORDER BY r.sequence
        LIMIT 1
    ) AS sequence
    FROM (SELECT DISTINCT partition, gate FROM unnest($3::int[], $4::text[]) AS u(partition, gate)) g
    WHERE NOT EXISTS (
        SELECT 1 FROM rheo_deliveries h
        WHERE h.stream = $1 AND h.group_name = $2 AND h.partition = g.partition
          AND h.gate = g.gate AND h.gate IS NOT NULL
          AND h.status IN ('available', 'leased'))
), free AS (
    SELECT d.ctid FROM rheo_deliveries d
    JOIN next n ON d.partition = n.partition AND d.sequence = n.sequence
    WHERE d.stream = $1 AND d.group_name = $2 AND d.status = 'parked'
    FOR UPDATE OF d SKIP LOCKED
)
UPDATE rheo_deliveries d SET status = 'available'
WHERE d.ctid = ANY (ARRAY(SELECT ctid FROM free)) AND d.status = 'parked'
