-- What a gated head that exhausts its attempts does (docs/groups.md#quarantine):
-- 'dead_letter' (as before), or 'quarantine': it stays leased to the
-- consumer 'rheo:quarantine', expiring never, so its key waits, in order,
-- until an operator releases it.
ALTER TABLE rheo_groups ADD COLUMN on_exhausted text NOT NULL DEFAULT 'dead_letter'
    CHECK (on_exhausted IN ('dead_letter', 'quarantine'));
