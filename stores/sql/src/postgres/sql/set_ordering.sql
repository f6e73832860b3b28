-- A reset of every partition changes the group's ordering
-- (docs/groups.md#ordering). The caller holds every cursor row of the
-- group (PostgreSQL; SQLite has one writer), so no fetch is deciding under
-- the old ordering meanwhile.
UPDATE rheo_groups SET ordering = $3 WHERE stream = $1 AND name = $2
