-- The first half of a batch ack (settle_acks.sql is the second): deletes
-- the deliveries acked on their first attempt after the group's start
-- (migrations/sqlite/0009_first_acks_leave_no_row.sql), fenced on their
-- lease ids, and returns them.
DELETE FROM rheo_deliveries
WHERE stream = ?1 AND group_name = ?2 AND status = 'leased' AND attempt = 1
  AND (event_id, lease_id) IN (SELECT value ->> 0, value ->> 1 FROM json_each(?3))
  AND sequence > (SELECT gp.started_after FROM rheo_group_partitions AS gp
                  WHERE gp.stream = ?1 AND gp.group_name = ?2
                    AND gp.partition = rheo_deliveries.partition)
RETURNING event_id, partition, gate
