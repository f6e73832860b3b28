-- Reads, in one round trip, what a settle of a gate's head needs to know
-- of its gate (`docs/backends.md#redis`): a read, it writes nothing and
-- decides nothing.
--
-- ARGV: per gate, five arguments: the partition's gates sorted set, its
-- records hash, the gate's lex range (min, max) and the settled
-- delivery's member. A member ends in `:` and its zero-padded sequence;
-- the record of sequence n is the hash's field n in decimal.
-- Returns per gate a pair: the range's first two members (as
-- ZRANGEBYLEX ... LIMIT 0 2 gives them), and the record of the first of
-- them that is not the settled one (nil: no such member, or no record).
local out = {}
for i = 1, #ARGV, 5 do
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
  out[#out + 1] = { firsts, record }
end
return out
