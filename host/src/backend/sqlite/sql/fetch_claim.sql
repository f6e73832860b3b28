UPDATE rheo_deliveries AS d
SET status = 'leased', attempt = d.attempt + 1, lease_id = c.value ->> 2, consumer_id = ?3,
    leased_at = ?4, expires_at = ?5, available_at = NULL
FROM json_each(?6) AS c
WHERE d.stream = ?1 AND d.group_name = ?2
  AND d.partition = c.value ->> 0 AND d.sequence = c.value ->> 1
RETURNING partition, sequence, attempt, lease_id
