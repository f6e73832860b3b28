-- Each claim finds its row through the primary key (the rowid subquery
-- keeps the planner from walking the group's deliveries for every claim).
UPDATE rheo_deliveries AS d
SET status = 'leased', attempt = d.attempt + 1, lease_id = c.value ->> 2, consumer_id = ?3,
    leased_at = ?4, expires_at = ?5, available_at = NULL, paced = NULL
FROM json_each(?6) AS c
WHERE d.rowid = (SELECT r.rowid FROM rheo_deliveries AS r
                 WHERE r.stream = ?1 AND r.group_name = ?2
                   AND r.partition = c.value ->> 0 AND r.sequence = c.value ->> 1)
RETURNING partition, sequence, attempt, lease_id
