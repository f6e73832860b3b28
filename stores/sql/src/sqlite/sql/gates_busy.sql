-- Which of these gates of one partition have a delivery open: a head
-- (available or leased) or one parked behind it. Two probes per gate (the
-- terms spell out each partial index's condition, which SQLite matches).
SELECT g.value FROM json_each(?4) AS g
WHERE EXISTS (SELECT 1 FROM rheo_deliveries AS d
              WHERE d.stream = ?1 AND d.group_name = ?2 AND d.partition = ?3
                AND d.gate = g.value AND d.gate IS NOT NULL
                AND d.status IN ('available', 'leased'))
   OR EXISTS (SELECT 1 FROM rheo_deliveries AS d
              WHERE d.stream = ?1 AND d.group_name = ?2 AND d.partition = ?3
                AND d.gate = g.value AND d.status = 'parked')
