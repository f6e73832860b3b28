-- After heads of an ordered group were acked or dead-lettered: each named
-- (partition, gate) left with no head lets its lowest parked delivery
-- through (docs/groups.md#ordering).
UPDATE rheo_deliveries SET status = 'available'
WHERE rowid IN (
    SELECT (SELECT r.rowid FROM rheo_deliveries AS r
            WHERE r.stream = ?1 AND r.group_name = ?2 AND r.partition = g.value ->> 0
              AND r.gate = g.value ->> 1 AND r.status = 'parked'
            ORDER BY r.sequence
            LIMIT 1)
    FROM json_each(?3) AS g
    WHERE NOT EXISTS (
        SELECT 1 FROM rheo_deliveries AS h
        WHERE h.stream = ?1 AND h.group_name = ?2 AND h.partition = g.value ->> 0
          AND h.gate = g.value ->> 1 AND h.gate IS NOT NULL
          AND h.status IN ('available', 'leased'))
)
