INSERT INTO rheo_events (stream, partition, sequence, id, key, type, ts, payload, metadata)
SELECT ?1, e.value ->> 0, e.value ->> 1, e.value ->> 2, e.value ->> 3, e.value ->> 4,
       e.value ->> 5, e.value -> 6, e.value -> 7
FROM json_each(?2) AS e
