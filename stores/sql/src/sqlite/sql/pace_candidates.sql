-- The claimable deliveries of a key_rate group (docs/groups.md#flow), as
-- fetch_candidates.sql finds them, with what a claim asks the key's bucket:
-- the event's key, the paced mark and whether its lease expired (never
-- paced, counted). ?5: rows (partition, after), at most ?4 of each
-- partition's above `after`, in sequence order (one index range per
-- partition, then each event by its key).
SELECT d.partition, d.sequence, e.key, coalesce(d.paced, 0), d.status = 'leased'
FROM json_each(?5) AS p
JOIN rheo_deliveries AS d ON d.rowid IN (
    SELECT r.rowid FROM rheo_deliveries AS r
    WHERE r.stream = ?1 AND r.group_name = ?2 AND r.partition = p.value ->> 0
      AND r.sequence > p.value ->> 1
      AND r.status IN ('available', 'leased')
      AND ((r.status = 'available' AND (r.available_at IS NULL OR r.available_at <= ?3))
           OR (r.status = 'leased' AND r.expires_at <= ?3))
    ORDER BY r.sequence
    LIMIT ?4
)
CROSS JOIN rheo_events AS e
WHERE e.stream = ?1 AND e.partition = d.partition AND e.sequence = d.sequence
