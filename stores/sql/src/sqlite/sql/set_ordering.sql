-- A reset of every partition changes the group's ordering
-- (docs/groups.md#ordering) and flow (docs/groups.md#flow, ?4: as
-- Flow::to_json writes it), the two written together once checked to fit
-- each other. The caller holds every cursor row of the group (PostgreSQL;
-- SQLite has one writer), so no fetch is deciding under the old gates
-- meanwhile.
UPDATE rheo_groups SET ordering = ?3, flow = ?4 WHERE stream = ?1 AND name = ?2
