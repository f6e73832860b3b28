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

-- Acks a batch one by one, as before (0008_ack_by_event.sql): each
-- delivery reached by its event id and fenced on its lease id. A first
-- attempt after the group's start is deleted, any other is kept as 'acked'.
-- A row changed meanwhile by another transaction is re-checked in its new
-- version, the partition's start included.
CREATE OR REPLACE FUNCTION rheo_ack(p_stream text, p_group text, p_events text[], p_leases text[])
RETURNS TABLE (event_id text, partition integer, gate text)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
BEGIN
    FOR i IN 1 .. coalesce(array_length(p_events, 1), 0) LOOP
        RETURN QUERY
        DELETE FROM rheo_deliveries d
        WHERE d.stream = p_stream AND d.group_name = p_group
          AND d.event_id = p_events[i] AND d.lease_id = p_leases[i]
          AND d.attempt = 1
          AND d.sequence > (SELECT gp.started_after FROM rheo_group_partitions gp
                            WHERE gp.stream = p_stream AND gp.group_name = p_group
                              AND gp.partition = d.partition)
        RETURNING d.event_id, d.partition, d.gate;
        IF NOT FOUND THEN
            RETURN QUERY
            UPDATE rheo_deliveries d
            SET status = 'acked', lease_id = NULL, available_at = NULL
            WHERE d.stream = p_stream AND d.group_name = p_group
              AND d.event_id = p_events[i] AND d.lease_id = p_leases[i]
            RETURNING d.event_id, d.partition, d.gate;
        END IF;
    END LOOP;
END
$$;
