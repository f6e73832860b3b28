-- Group ordering (docs/groups.md#ordering): under 'key' one delivery of a key
-- is out at a time, in sequence order; under 'partition' one per partition.
ALTER TABLE rheo_groups ADD COLUMN ordering TEXT NOT NULL DEFAULT 'none'
    CHECK (ordering IN ('none', 'key', 'partition'));

-- gate: what a delivery of an ordered group waits its turn on (the event's
-- key under 'key', '' under 'partition'); NULL when nothing orders it.
-- A gate has at most one delivery available or leased, its head; the gate's
-- other open deliveries are 'parked', in no claim's scan, until the head is
-- acked or dead-lettered and the lowest of them is let through.
ALTER TABLE rheo_deliveries ADD COLUMN gate TEXT;

-- Is a gate busy: one probe per gate on the heads of gated deliveries.
CREATE INDEX rheo_deliveries_gate_heads ON rheo_deliveries (stream, group_name, partition, gate)
    WHERE gate IS NOT NULL AND status IN ('available', 'leased');
-- A gate's next parked delivery, and whether it has one.
CREATE INDEX rheo_deliveries_parked ON rheo_deliveries (stream, group_name, partition, gate, sequence)
    WHERE status = 'parked';
-- The lowest parked delivery of a partition: parked deliveries are not
-- acked, so the frontier and the scan floor stay below them.
CREATE INDEX rheo_deliveries_parked_by_sequence ON rheo_deliveries (stream, group_name, partition, sequence)
    WHERE status = 'parked';
