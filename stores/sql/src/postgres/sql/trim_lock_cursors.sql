-- Every group's cursor row in the partition, held until the trim commits,
-- so that no fetch creates deliveries of the removed events or parks behind
-- a gate the trim is letting through. In group order: no other writer
-- locks several groups' cursor rows (a stream's delete waits for the
-- trim's hold on the stream's row).
SELECT group_name, cursor FROM rheo_group_partitions
WHERE stream = $1 AND partition = $2
ORDER BY group_name COLLATE "C"
FOR UPDATE
