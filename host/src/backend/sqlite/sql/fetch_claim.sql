UPDATE rheo_deliveries AS d
SET status = 'leased', attempt = d.attempt + 1, lease_id = v.column3, consumer_id = ?3,
    leased_at = ?4, expires_at = ?5, available_at = NULL
FROM (VALUES {rows}) AS v
WHERE d.stream = ?1 AND d.group_name = ?2 AND d.partition = v.column1 AND d.sequence = v.column2
RETURNING partition, sequence, attempt, lease_id
