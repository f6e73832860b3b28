-- The first half of the fetch of a group without gates (no ordering, no
-- key_concurrency), in one call on the connection's thread
-- (docs/benchmarks.md#sqlite-calls-on-the-writers-thread): what
-- fetch_poison, fetch_candidates and fetch_lock_cursors do, one statement
-- after the other. No row locks: BEGIN IMMEDIATE already serializes every
-- fetch. Rows by kind, the same as PostgreSQL's: 0 a delivery just
-- dead-lettered (partition, gate in text); 1 a claimable delivery
-- (partition, sequence in a); 2 a cursor row (partition, cursor in a, high
-- watermark in b, the group's ordering in text, its flow in flow: the
-- caller checks they still give no gate). The poison guard runs first, so
-- no dead-lettered delivery is a candidate.
UPDATE rheo_deliveries
SET status = 'dead', reason = ?7, dead_lettered_at = ?4, lease_id = NULL, available_at = NULL
WHERE stream = ?1 AND group_name = ?2 AND partition IN (SELECT value FROM json_each(?3))
  AND status = 'leased' AND expires_at <= ?4 AND attempt >= ?6
RETURNING 0 AS kind, partition, NULL AS a, NULL AS b, gate AS text, NULL AS flow;
SELECT 1 AS kind, d.partition, d.sequence AS a, NULL AS b, NULL AS text, NULL AS flow
FROM json_each(?3) AS p
JOIN rheo_deliveries AS d ON d.rowid IN (
    SELECT r.rowid FROM rheo_deliveries AS r
    WHERE r.stream = ?1 AND r.group_name = ?2 AND r.partition = p.value
      AND r.status IN ('available', 'leased')
      AND ((r.status = 'available' AND (r.available_at IS NULL OR r.available_at <= ?4))
           OR (r.status = 'leased' AND r.expires_at <= ?4))
    ORDER BY r.sequence
    LIMIT ?5
);
SELECT 2 AS kind, gp.partition, gp.cursor AS a, p.high_watermark AS b, gr.ordering AS text,
       gr.flow
FROM rheo_group_partitions gp
JOIN rheo_partitions p ON p.stream = gp.stream AND p.partition = gp.partition
JOIN rheo_groups gr ON gr.stream = gp.stream AND gr.name = gp.group_name
WHERE gp.stream = ?1 AND gp.group_name = ?2 AND gp.partition IN (SELECT value FROM json_each(?3))
ORDER BY gp.partition
