-- The group's key_rate buckets (docs/groups.md#flow): a group created again
-- starts with full ones.
DELETE FROM rheo_key_rates WHERE stream = $1 AND group_name = $2
