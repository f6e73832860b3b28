-- Acks a batch: rheo_ack (migrations/postgres/0009_first_acks_leave_no_row.sql)
-- takes each delivery by its event id, fenced on its lease id, deletes it
-- when acked on its first attempt after the group's start and marks it
-- 'acked' otherwise, and returns those it acked. The fence names lease_id
-- only: a constraint keeps it set exactly while the row is leased.
SELECT a.event_id, a.partition, a.gate FROM rheo_ack($1, $2, $3::text[], $4::text[]) AS a
