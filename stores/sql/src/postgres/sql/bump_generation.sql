-- Every delete, in its transaction: the servers sharing the database forget
-- what they kept of streams and groups when they see the counter move
-- (migrations/postgres/0006_catalog_generation.sql).
UPDATE rheo_catalog SET generation = generation + 1 RETURNING generation
