-- A batch of plain acks, fenced: each event id is looked up in the log,
-- then its delivery by its primary key (CROSS JOIN fixes that order;
-- migrations/sqlite/0011_settles_by_position.sql). A delivery whose event
-- retention removed is never leased, so no ack is missed.
UPDATE rheo_deliveries SET status = 'acked', lease_id = NULL, available_at = NULL
WHERE rowid IN (
    SELECT d.rowid FROM json_each(?3) AS a
    CROSS JOIN rheo_events AS e
    CROSS JOIN rheo_deliveries AS d
    WHERE e.stream = ?1 AND e.id = a.value ->> 0
      AND d.stream = ?1 AND d.group_name = ?2
      AND d.partition = e.partition AND d.sequence = e.sequence
      AND d.status = 'leased' AND d.lease_id = a.value ->> 1)
RETURNING event_id, partition, gate
