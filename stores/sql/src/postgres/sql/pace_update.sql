-- Claimable deliveries of a key_rate group whose key had no token
-- (docs/groups.md#flow): available, due at the slot their bucket reserved
-- (rows: partition, sequence, due), paced. Its attempt is unchanged, and a
-- gated one stays its gate's head (not parked). One whose lease expired is
-- never paced (it goes out again at once, counted in its bucket).
UPDATE rheo_deliveries d
SET status = 'available', available_at = c.due, lease_id = NULL, paced = true
FROM unnest($3::int[], $4::bigint[], $5::timestamptz[]) AS c(partition, sequence, due)
WHERE d.stream = $1 AND d.group_name = $2
  AND d.partition = c.partition AND d.sequence = c.sequence
