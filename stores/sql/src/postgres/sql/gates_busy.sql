-- Which of these gates of one partition have a delivery open: a head
-- (available or leased) or one parked behind it. Two probes per gate.
SELECT g.gate FROM unnest($4::text[]) AS g(gate)
WHERE EXISTS (SELECT 1 FROM rheo_deliveries d
              WHERE d.stream = $1 AND d.group_name = $2 AND d.partition = $3
                AND d.gate = g.gate AND d.gate IS NOT NULL
                AND d.status IN ('available', 'leased'))
   OR EXISTS (SELECT 1 FROM rheo_deliveries d
              WHERE d.stream = $1 AND d.group_name = $2 AND d.partition = $3
                AND d.gate = g.gate AND d.status = 'parked')
