-- The delivery a settle or renew names, for its fence (sql/claim.rs): the
-- event id is looked up in the log, then the delivery by its whole primary
-- key, in a lateral lookup planned on its own (OFFSET 0). Reached by
-- (stream, group, event id) instead, the generic plan made after an
-- ANALYZE that saw the deliveries table empty could walk every index
-- entry of the group (migrations/postgres/0010_acks_by_position.sql). A
-- delivery whose event retention removed is never leased, so nothing
-- fenced is missed; delivery_by_event still finds those (dead letters).
SELECT d.* FROM rheo_events e
CROSS JOIN LATERAL (
    SELECT d.partition, d.sequence, d.status, d.attempt, d.lease_id, d.consumer_id,
           d.leased_at, d.expires_at, d.gate
    FROM rheo_deliveries d
    WHERE d.stream = $1 AND d.group_name = $2
      AND d.partition = e.partition AND d.sequence = e.sequence AND d.event_id = $3
    OFFSET 0
) d
WHERE e.stream = $1 AND e.id = $3
