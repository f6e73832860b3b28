-- What a fetch's walk must know of each of these gates of one partition
-- (docs/groups.md#ordering, docs/groups.md#flow): how many heads it has
-- (its deliveries available or leased: at most its slots, one under an
-- ordering), and whether deliveries are parked behind them (1) or not (0).
-- Two probes per gate (the terms spell out each partial index's condition,
-- which SQLite matches).
SELECT g.value,
       (SELECT count(*) FROM rheo_deliveries AS d
        WHERE d.stream = ?1 AND d.group_name = ?2 AND d.partition = ?3
          AND d.gate = g.value AND d.gate IS NOT NULL
          AND d.status IN ('available', 'leased')) AS heads,
       EXISTS (SELECT 1 FROM rheo_deliveries AS d
               WHERE d.stream = ?1 AND d.group_name = ?2 AND d.partition = ?3
                 AND d.gate = g.value AND d.status = 'parked') AS parked
FROM json_each(?4) AS g
