-- The partition's first stored sequence and its high watermark (BEGIN
-- IMMEDIATE already holds appends back).
SELECT first_sequence, high_watermark FROM rheo_partitions WHERE stream = ?1 AND partition = ?2
