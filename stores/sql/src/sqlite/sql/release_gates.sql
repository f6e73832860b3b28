-- After heads of a gated group were acked, dead-lettered, retried (and
-- parked) or trimmed away: each named (partition, gate) lets its lowest
-- parked deliveries through, as many as its slots (?3: one under an
-- ordering, key_concurrency under a flow) leave beside the heads it still
-- has, available or leased (docs/groups.md#ordering, docs/groups.md#flow).
-- SQLite's LIMIT cannot name a gate's free slots, so `next` steps from one
-- parked delivery of the gate to the next, one probe of the parked index
-- each, no further than its free slots.
WITH RECURSIVE asked(partition, gate, free) AS (
    SELECT u.partition, u.gate,
           ?3 - (SELECT count(*) FROM rheo_deliveries AS h
                 WHERE h.stream = ?1 AND h.group_name = ?2 AND h.partition = u.partition
                   AND h.gate = u.gate AND h.gate IS NOT NULL
                   AND h.status IN ('available', 'leased'))
    FROM (SELECT DISTINCT g.value ->> 0 AS partition, g.value ->> 1 AS gate
          FROM json_each(?4) AS g) AS u
), next(partition, gate, free, sequence) AS (
    SELECT a.partition, a.gate, a.free - 1,
           (SELECT min(r.sequence) FROM rheo_deliveries AS r
            WHERE r.stream = ?1 AND r.group_name = ?2 AND r.partition = a.partition
              AND r.gate = a.gate AND r.status = 'parked')
    FROM asked AS a
    WHERE a.free > 0
    UNION ALL
    SELECT n.partition, n.gate, n.free - 1,
           (SELECT min(r.sequence) FROM rheo_deliveries AS r
            WHERE r.stream = ?1 AND r.group_name = ?2 AND r.partition = n.partition
              AND r.gate = n.gate AND r.status = 'parked' AND r.sequence > n.sequence)
    FROM next AS n
    WHERE n.free > 0 AND n.sequence IS NOT NULL
)
UPDATE rheo_deliveries SET status = 'available'
WHERE rowid IN (
    SELECT (SELECT r.rowid FROM rheo_deliveries AS r
            WHERE r.stream = ?1 AND r.group_name = ?2 AND r.partition = n.partition
              AND r.sequence = n.sequence)
    FROM next AS n
    WHERE n.sequence IS NOT NULL
)
