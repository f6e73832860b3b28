-- Reads, in one round trip and so as one snapshot, what a replay or a
-- redrive needs to know of the gates it re-opens deliveries in
-- (`docs/backends.md#redis`): a read, it writes nothing and decides
-- nothing.
--
-- KEYS: the partition's gates sorted set, its records hash and its gate
-- counts hash. ARGV: per gate, three arguments: its lex range (min, max)
-- and its name. A member ends in `:` and its zero-padded sequence; the
-- record of sequence n is the records hash's field n in decimal.
-- Returns per gate a triple: its members in order, their records (false
-- where there is none) and its count of open deliveries (false: none).
local out = {}
for i = 1, #ARGV, 3 do
  local members = redis.call('ZRANGEBYLEX', KEYS[1], ARGV[i], ARGV[i + 1])
  local records = {}
  if #members > 0 then
    local fields = {}
    for j, m in ipairs(members) do
      fields[j] = string.match(m, ':0*(%d+)$') or ''
    end
    records = redis.call('HMGET', KEYS[2], unpack(fields))
  end
  out[#out + 1] = { members, records, redis.call('HGET', KEYS[3], ARGV[i + 2]) }
end
return out
