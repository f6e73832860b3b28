-- The delivery a settle or renew names, for its fence (sql/claim.rs): the
-- event id is looked up in the log, then the delivery by its primary key
-- (CROSS JOIN fixes that order; migrations/sqlite/0011_settles_by_position.sql).
-- A delivery whose event retention removed is never leased, so nothing
-- fenced is missed; delivery_by_event still finds those (dead letters).
SELECT d.partition, d.sequence, d.status, d.attempt, d.lease_id, d.consumer_id,
       d.leased_at, d.expires_at, d.gate
FROM rheo_events AS e
CROSS JOIN rheo_deliveries AS d
WHERE e.stream = ?1 AND e.id = ?3
  AND d.stream = ?1 AND d.group_name = ?2
  AND d.partition = e.partition AND d.sequence = e.sequence AND d.event_id = ?3
