-- Where a dead letter is, by its event id, once retention removed its event
-- (the dead-letter page cursor, sql/inspect.rs): only dead letters outlive
-- their events, and only they keep an index by event id
-- (migrations/sqlite/0011_settles_by_position.sql).
SELECT partition, sequence, status, attempt, lease_id, consumer_id, leased_at, expires_at
FROM rheo_deliveries
WHERE stream = ?1 AND group_name = ?2 AND event_id = ?3 AND status = 'dead'
