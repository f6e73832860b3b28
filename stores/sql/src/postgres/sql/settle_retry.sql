-- By the full key the fencing check read, so the lookup is one index probe.
-- A delivery with a gate is parked: the caller then lets its gate hand out
-- its lowest parked deliveries for the slots it has free (release_gates),
-- the first of them this one unless a replay or a redrive re-opened a lower
-- one while it was out (docs/groups.md#ordering, docs/groups.md#flow).
UPDATE rheo_deliveries
SET status = CASE WHEN gate IS NULL THEN 'available' ELSE 'parked' END,
    lease_id = NULL, available_at = $5, reason = $6
WHERE stream = $1 AND group_name = $2 AND partition = $7 AND sequence = $8
  AND event_id = $3 AND status = 'leased' AND lease_id = $4
RETURNING gate
