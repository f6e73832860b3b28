-- Reads, in one round trip, what a settle of a gate's head needs to know
-- of its gate (`docs/backends.md#redis`): a read, it writes nothing and
-- decides nothing.
--
-- ARGV: per gate, seven arguments: the partition's gates sorted set, its
-- records hash, the gate's lex range (min, max), the settled delivery's
-- member, the partition's gate counts hash and the gate. A member ends in
-- `:` and its zero-padded sequence; the record of sequence n is the
-- hash's field n in decimal.
-- Returns per gate a triple: the range's first two members (as
-- ZRANGEBYLEX ... LIMIT 0 2 gives them), the record of the first of them
-- that is not the settled one (nil: no such member, or no record), and
-- the gate's count of open deliveries (nil: none).
local out = {}
for i = 1, #ARGV, 7 do
  local firsts = redis.call('ZRANGEBYLEX', ARGV[i], ARGV[i + 2], ARGV[i + 3], 'LIMIT', 0, 2)
  local record = false
  for _, m in ipairs(firsts) do
    if m ~= ARGV[i + 4] then
      local seq = string.match(m, ':0*(%d+)$')
      if seq then
        record = redis.call('HGET', ARGV[i + 1], seq)
      end
      break
    end
  end
  out[#out + 1] = { firsts, record, redis.call('HGET', ARGV[i + 5], ARGV[i + 6]) }
end
return out
