-- The delivery a settle or renew names, for its fence (sql/claim.rs): as
-- delivery_by_event (PostgreSQL reaches it through the log instead, for
-- its cached plans' sake).
SELECT partition, sequence, status, attempt, lease_id, consumer_id, leased_at, expires_at
FROM rheo_deliveries
WHERE stream = ?1 AND group_name = ?2 AND event_id = ?3
