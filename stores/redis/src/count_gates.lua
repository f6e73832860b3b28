-- Rebuilds one group partition's gate counts from its gates sorted set
-- (the migration `0001_gate_counts`, `docs/backends.md#redis`): every
-- member names its gate (its length in five digits, `:`, the gate, `:`,
-- the sequence), and a gate's count is how many members name it.
--
-- KEYS: the gates sorted set, the gate counts hash. Returns the number of
-- gates counted.
redis.call('DEL', KEYS[2])
local counts = {}
local gates = 0
for _, m in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
  local len = tonumber(string.sub(m, 1, 5))
  local gate = string.sub(m, 7, 6 + len)
  if counts[gate] == nil then
    counts[gate] = 0
    gates = gates + 1
  end
  counts[gate] = counts[gate] + 1
end
for gate, n in pairs(counts) do
  redis.call('HSET', KEYS[2], gate, n)
end
return gates
