UPDATE rheo_deliveries d
SET status = 'leased', attempt = d.attempt + 1, lease_id = c.lease_id, consumer_id = $3,
    leased_at = $4, expires_at = $5, available_at = NULL, paced = NULL
FROM unnest($6::int[], $7::bigint[], $8::text[]) AS c(partition, sequence, lease_id)
WHERE d.stream = $1 AND d.group_name = $2
  AND d.partition = c.partition AND d.sequence = c.sequence
RETURNING d.partition, d.sequence, d.attempt, d.lease_id
