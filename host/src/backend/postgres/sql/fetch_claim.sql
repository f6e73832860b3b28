WITH claimed AS (
    UPDATE rheo_deliveries d
    SET status = 'leased', attempt = d.attempt + 1, lease_id = c.lease_id, consumer_id = $3,
        leased_at = $4, expires_at = $5, available_at = NULL
    FROM unnest($6::int[], $7::bigint[], $8::text[]) AS c(partition, sequence, lease_id)
    WHERE d.stream = $1 AND d.group_name = $2
      AND d.partition = c.partition AND d.sequence = c.sequence
    RETURNING d.partition, d.sequence, d.attempt, d.lease_id
)
SELECT e.partition, e.sequence, e.id, e.key, e.type, e.ts, e.payload, e.metadata,
       claimed.attempt, claimed.lease_id
FROM claimed
JOIN rheo_events e
  ON e.stream = $1 AND e.partition = claimed.partition AND e.sequence = claimed.sequence
