-- Re-opens what is not open (leased, acked, dead): available now; a gated
-- one is then parked or made its gate's head by regate.sql. A parked
-- delivery is open already and is not counted.
UPDATE rheo_deliveries
SET status = 'available', available_at = NULL, paced = NULL, lease_id = NULL, dead_lettered_at = NULL
WHERE stream = ?1 AND group_name = ?2 AND partition = ?3 AND sequence > ?4 AND sequence < ?5
  AND status NOT IN ('available', 'parked')
