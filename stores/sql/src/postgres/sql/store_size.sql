-- The bytes Rheo's tables take in this schema: rows, indexes and TOAST.
SELECT COALESCE(sum(pg_total_relation_size(c.oid)), 0)::bigint
FROM pg_class c
JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = current_schema() AND c.relkind = 'r' AND c.relname LIKE 'rheo\_%'
