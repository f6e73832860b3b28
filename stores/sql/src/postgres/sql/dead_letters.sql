-- Dead letters in listing order, each with its event while the stream still
-- holds it: retention removes the event but not the dead letter, which
-- keeps the event's id (docs/log.md#retention).
SELECT d.partition, d.sequence, e.id, e.key, e.type, e.ts, e.payload, e.metadata,
       d.attempt, d.reason, d.dead_lettered_at, d.event_id
FROM rheo_deliveries d
LEFT JOIN rheo_events e
  ON e.stream = d.stream AND e.partition = d.partition AND e.sequence = d.sequence
WHERE d.stream = $1 AND d.group_name = $2 AND d.status = 'dead'
  AND (d.sequence, d.partition) > ($3, $4)
ORDER BY d.sequence, d.partition
LIMIT $5
