-- What a fetch's walk must know of each of these gates of one partition
-- (docs/groups.md#ordering, docs/groups.md#flow): how many heads it has
-- (its deliveries available or leased: at most its slots, one under an
-- ordering), and whether deliveries are parked behind them (1) or not (0).
-- Two probes per gate, each on its partial index.
SELECT g.gate,
       (SELECT count(*) FROM rheo_deliveries d
        WHERE d.stream = $1 AND d.group_name = $2 AND d.partition = $3
          AND d.gate = g.gate AND d.gate IS NOT NULL
          AND d.status IN ('available', 'leased')) AS heads,
       CASE WHEN EXISTS (SELECT 1 FROM rheo_deliveries d
                         WHERE d.stream = $1 AND d.group_name = $2 AND d.partition = $3
                           AND d.gate = g.gate AND d.status = 'parked')
            THEN 1 ELSE 0 END AS parked
FROM unnest($4::text[]) AS g(gate)
