-- Acks a batch. Each (event_id, lease_id) is first located through the
-- unique event index (OFFSET 0 keeps that lookup from being merged into a
-- join the planner might drive from another index), then its row is updated
-- by its full key, fenced on its lease id. A row changed meanwhile by another
-- transaction is re-checked in its new version: a renewed lease is still
-- acked, a settled or re-leased one is not.
--
-- The fence names lease_id only: a constraint keeps it set exactly while the
-- row is leased. Spelling out status = 'leased' too would let the planner
-- drive the update from rheo_deliveries_open, whose dead entries (left by
-- every delivery that passed through it, until a VACUUM) it cannot see.
UPDATE rheo_deliveries d SET status = 'acked', lease_id = NULL, available_at = NULL
FROM (
    SELECT x.partition, x.sequence, a.lease_id
    FROM unnest($3::text[], $4::text[]) AS a(event_id, lease_id),
    LATERAL (
        SELECT r.partition, r.sequence FROM rheo_deliveries r
        WHERE r.stream = $1 AND r.group_name = $2 AND r.event_id = a.event_id
        OFFSET 0
    ) AS x
) AS k
WHERE d.stream = $1 AND d.group_name = $2
  AND d.partition = k.partition AND d.sequence = k.sequence
  AND d.lease_id = k.lease_id
RETURNING d.event_id, d.partition, d.gate
