-- Acks a batch of deliveries one by one, each reached by its event id
-- through the unique event index (rheo_deliveries_by_event) and fenced on
-- its lease id; returns the rows acked.
--
-- One statement joining the batch with rheo_deliveries could be planned,
-- while a group's rows were few or the table's statistics old, as a walk of
-- every delivery of the group hashed against the batch; the cached plan then
-- made each ack slower than the last until statistics were refreshed (up to
-- 35 ms for a batch of 50 acks in a new store; docs/benchmarks.md). An
-- equality on the whole unique key has one plan whatever the statistics say.
--
-- A row changed meanwhile by another transaction is re-checked in its new
-- version: a renewed lease is still acked, a settled or re-leased one is not.
CREATE FUNCTION rheo_ack(p_stream text, p_group text, p_events text[], p_leases text[])
RETURNS TABLE (event_id text, partition integer, gate text)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
BEGIN
    FOR i IN 1 .. coalesce(array_length(p_events, 1), 0) LOOP
        RETURN QUERY
        UPDATE rheo_deliveries d
        SET status = 'acked', lease_id = NULL, available_at = NULL
        WHERE d.stream = p_stream AND d.group_name = p_group
          AND d.event_id = p_events[i] AND d.lease_id = p_leases[i]
        RETURNING d.event_id, d.partition, d.gate;
    END LOOP;
END
$$;
