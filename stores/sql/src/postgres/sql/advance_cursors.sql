-- The end of a fetch, which holds these cursor rows (fetch_lock_cursors):
-- moves each cursor past the deliveries just created and raises the floor to
-- the lowest open delivery, parked ones included (docs/groups.md#ordering,
-- docs/groups.md#flow), or the cursor when none is open. This statement
-- started after the rows were locked, so it sees every re-open committed
-- before; one still running lowers the floor again when it gets the row.
-- Rows that would not change are not written.
WITH next AS (
    SELECT gp.partition, c.cursor,
           COALESCE(LEAST((SELECT d.sequence FROM rheo_deliveries d
                           WHERE d.stream = gp.stream AND d.group_name = gp.group_name
                             AND d.partition = gp.partition AND d.sequence >= gp.floor
                             AND d.status IN ('available', 'leased')
                           ORDER BY d.sequence
                           LIMIT 1),
                          (SELECT d.sequence FROM rheo_deliveries d
                           WHERE d.stream = gp.stream AND d.group_name = gp.group_name
                             AND d.partition = gp.partition AND d.sequence >= gp.floor
                             AND d.status = 'parked'
                           ORDER BY d.sequence
                           LIMIT 1)),
                    c.cursor) AS floor
    FROM rheo_group_partitions gp
    JOIN unnest($3::int[], $4::bigint[]) AS c(partition, cursor) ON c.partition = gp.partition
    WHERE gp.stream = $1 AND gp.group_name = $2
)
UPDATE rheo_group_partitions gp SET cursor = n.cursor, floor = n.floor
FROM next n
WHERE gp.stream = $1 AND gp.group_name = $2 AND gp.partition = n.partition
  AND (gp.cursor, gp.floor) IS DISTINCT FROM (n.cursor, n.floor)
