-- Acks a batch: each (event_id, lease_id) is looked up through the unique
-- event index (OFFSET 0 keeps the lookup from being merged into a join the
-- planner might drive from the leased index), and the rows still leased
-- under that lease are updated by ctid (a TID scan; a row changed meanwhile
-- by another transaction has a new ctid, so it is skipped, not acked twice).
-- No status test out here: it would let the planner use a partial index whose
-- dead entries grow with history.
UPDATE rheo_deliveries d SET status = 'acked', lease_id = NULL, available_at = NULL
WHERE d.ctid = ANY (ARRAY(
    SELECT x.ctid
    FROM unnest($3::text[], $4::text[]) AS a(event_id, lease_id),
    LATERAL (
        SELECT r.ctid, r.status, r.lease_id FROM rheo_deliveries r
        WHERE r.stream = $1 AND r.group_name = $2 AND r.event_id = a.event_id
        OFFSET 0
    ) AS x
    WHERE x.status = 'leased' AND x.lease_id = a.lease_id
))
RETURNING d.event_id
