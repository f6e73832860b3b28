-- A group's leased deliveries after a position, in (partition, sequence)
-- order, expired ones included (docs/groups.md#what-is-out-leases): what
-- the lag counts in flight. The page is cut, and what has expired judged,
-- by the core (policy::lease_page). The IN term is the open-deliveries
-- index's own condition, so that SQLite uses it.
SELECT partition, sequence, event_id, lease_id, consumer_id, attempt, leased_at, expires_at,
       reason
FROM rheo_deliveries
WHERE stream = ?1 AND group_name = ?2
  AND status IN ('available', 'leased') AND status = 'leased'
  AND (partition, sequence) > (?3, ?4)
ORDER BY partition, sequence
LIMIT ?5
