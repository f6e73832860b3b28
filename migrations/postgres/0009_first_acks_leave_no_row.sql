-- An ack on a delivery's first attempt deletes its row instead of keeping
-- it as 'acked' (docs/backends.md#sql-backends): the deliveries table holds
-- what is open, dead or was claimed more than once, not one row per event
-- and group for ever, and the ack deletes a row where it wrote a second
-- version of it with new index entries.
--
-- What a missing row below a partition's cursor means then depends on where
-- the group started: at or before `started_after` (set by the group's
-- creation and by each reset), an event the group never reached; after
-- it, one acked on its first attempt. A replay re-opens the first as never
-- delivered (attempt 0) and the second on attempt 1, so that its next claim
-- is attempt 2 (docs/groups.md#replay-and-reset). A delivery at or before
-- `started_after` keeps its 'acked' row: without one, it would read as
-- never delivered.
--
-- Existing groups start after their cursor: every delivery below it keeps
-- its row, as before.
ALTER TABLE rheo_group_partitions ADD COLUMN started_after bigint NOT NULL DEFAULT 0;
UPDATE rheo_group_partitions SET started_after = cursor - 1;
ALTER TABLE rheo_group_partitions ALTER COLUMN started_after DROP DEFAULT;

-- Acks a batch in three statements however long it is, where 0008 ran one
-- per ack (a statement in a PL/pgSQL loop costs some 30 µs on the server,
-- so 50 acks took 1.5-2.5 ms there; docs/benchmarks.md):
--   1. each batch item's delivery, reached by a lateral lookup on the whole
--      unique event key (rheo_deliveries_by_event: one plan whatever the
--      statistics say, as 0008 needed) and fenced on its lease id, is
--      locked, and its row id kept: to delete when acked on its first
--      attempt after the group's start, to mark 'acked' otherwise;
--   2. the deletes, 3. the marks, each by row id (a TID scan).
-- Under READ COMMITTED, a row another transaction changed meanwhile is
-- re-checked in its new version when it is locked (a renewed lease is
-- still acked, a settled or re-leased one is not), and the lock keeps it
-- as it is until the ack commits; statements 2 and 3 take a new snapshot,
-- which sees that version.
CREATE OR REPLACE FUNCTION rheo_ack(p_stream text, p_group text, p_events text[], p_leases text[])
RETURNS TABLE (event_id text, partition integer, gate text)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    v_forget tid[];
    v_keep tid[];
BEGIN
    SELECT array_agg(h.row_id) FILTER (WHERE h.forget),
           array_agg(h.row_id) FILTER (WHERE NOT h.forget)
    INTO v_forget, v_keep
    FROM unnest(p_events, p_leases) AS a(event_id, lease_id)
    CROSS JOIN LATERAL (
        SELECT d.ctid AS row_id,
               d.attempt = 1
               AND d.sequence > (SELECT gp.started_after FROM rheo_group_partitions gp
                                 WHERE gp.stream = p_stream AND gp.group_name = p_group
                                   AND gp.partition = d.partition) AS forget
        FROM rheo_deliveries d
        WHERE d.stream = p_stream AND d.group_name = p_group
          AND d.event_id = a.event_id AND d.lease_id = a.lease_id
        FOR UPDATE
    ) h;
    RETURN QUERY
    DELETE FROM rheo_deliveries d WHERE d.ctid = ANY (v_forget)
    RETURNING d.event_id, d.partition, d.gate;
    RETURN QUERY
    UPDATE rheo_deliveries d SET status = 'acked', lease_id = NULL, available_at = NULL
    WHERE d.ctid = ANY (v_keep)
    RETURNING d.event_id, d.partition, d.gate;
END
$$;
