-- A group's leased deliveries after a position, in (partition, sequence)
-- order, expired ones included (docs/groups.md#what-is-out-leases): what
-- the lag counts in flight, read per partition from its scan floor up. The
-- page is cut, and what has expired judged, by the core
-- (policy::lease_page).
SELECT d.partition, d.sequence, d.event_id, d.lease_id, d.consumer_id, d.attempt,
       d.leased_at, d.expires_at, d.reason
FROM rheo_group_partitions gp
CROSS JOIN LATERAL (
    SELECT o.partition, o.sequence, o.event_id, o.lease_id, o.consumer_id, o.attempt,
           o.leased_at, o.expires_at, o.reason
    FROM rheo_deliveries o
    WHERE o.stream = gp.stream AND o.group_name = gp.group_name
      AND o.partition = gp.partition AND o.sequence >= gp.floor
      AND o.status IN ('available', 'leased') AND o.status = 'leased'
      AND (o.partition, o.sequence) > ($3, $4)
    ORDER BY o.sequence
    LIMIT $5
) d
WHERE gp.stream = $1 AND gp.group_name = $2 AND gp.partition >= $3
ORDER BY d.partition, d.sequence
LIMIT $5
