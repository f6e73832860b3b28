-- Every delete, in its transaction (migrations/sqlite/0006_catalog_generation.sql).
UPDATE rheo_catalog SET generation = generation + 1 RETURNING generation
