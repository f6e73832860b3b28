SELECT e.partition, e.sequence, e.id, e.key, e.type, e.ts, e.payload, e.metadata
FROM rheo_events e
JOIN unnest($2::int[], $3::bigint[]) AS w(partition, sequence)
  ON e.partition = w.partition AND e.sequence = w.sequence
WHERE e.stream = $1
