-- Acks a batch: rheo_ack (migrations/postgres/0010_acks_by_position.sql)
-- takes each delivery by its position (the event id looked up in the log),
-- fenced on its lease id, deletes it
-- when acked on its first attempt after the group's start and marks it
-- 'acked' otherwise, and returns those it acked. The fence names lease_id
-- only: a constraint keeps it set exactly while the row is leased.
SELECT a.event_id, a.partition, a.gate FROM rheo_ack($1, $2, $3::text[], $4::text[]) AS a
