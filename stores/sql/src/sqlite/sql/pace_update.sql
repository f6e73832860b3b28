-- Claimable deliveries of a key_rate group whose key had no token
-- (docs/groups.md#flow): available, due at the slot their bucket reserved
-- (rows: partition, sequence, due), paced. Its attempt is unchanged, and a
-- gated one stays its gate's head (not parked). One whose lease expired is
-- never paced (it goes out again at once, counted in its bucket).
UPDATE rheo_deliveries AS d
SET status = 'available', available_at = c.value ->> 2, lease_id = NULL, paced = 1
FROM json_each(?3) AS c
WHERE d.rowid = (SELECT r.rowid FROM rheo_deliveries AS r
                 WHERE r.stream = ?1 AND r.group_name = ?2
                   AND r.partition = c.value ->> 0 AND r.sequence = c.value ->> 1)
