INSERT INTO rheo_events (stream, partition, sequence, id, key, type, ts, payload, metadata)
SELECT $1, e.partition, e.sequence, e.id, e.key, e.type, e.ts, e.payload::jsonb, e.metadata::jsonb
FROM unnest($2::int[], $3::bigint[], $4::text[], $5::text[], $6::text[], $7::timestamptz[],
            $8::text[], $9::text[])
     AS e(partition, sequence, id, key, type, ts, payload, metadata)
