-- Reads, in one round trip, what a settle of some of a gate's heads (or a
-- trim that closes some of its deliveries) needs to know of the gate
-- (`docs/backends.md#redis`): a read, it writes nothing and decides
-- nothing.
--
-- ARGV: per gate, the partition's gates sorted set, its records hash, the
-- gate's lex range (min, max), the partition's gate counts hash, the gate,
-- a bound b, a window w, a count m and m members (the settled ones). A
-- member ends in `:` and its zero-padded sequence; the record of sequence
-- n is the records hash's field n in decimal.
-- Returns per gate a triple: the range's first w members (as ZRANGEBYLEX
-- ... LIMIT 0 w gives them), the records of those members that are not
-- among the m (false for the m, and where there is none), and the gate's
-- count of open deliveries (false: none). The members are read only when
-- that count is above b (else an empty list): the caller needs them only
-- then.
local out = {}
local i = 1
while i <= #ARGV do
  local count = redis.call('HGET', ARGV[i + 4], ARGV[i + 5])
  local bound, window, m = tonumber(ARGV[i + 6]), tonumber(ARGV[i + 7]), tonumber(ARGV[i + 8])
  local mine = {}
  for j = 1, m do
    mine[ARGV[i + 8 + j]] = true
  end
  local firsts, records = {}, {}
  if window > 0 and (tonumber(count) or 0) > bound then
    firsts = redis.call('ZRANGEBYLEX', ARGV[i], ARGV[i + 2], ARGV[i + 3], 'LIMIT', 0, window)
    for j, member in ipairs(firsts) do
      records[j] = false
      if not mine[member] then
        local seq = string.match(member, ':0*(%d+)$')
        if seq then
          records[j] = redis.call('HGET', ARGV[i + 1], seq)
        end
      end
    end
  end
  out[#out + 1] = { firsts, records, count }
  i = i + 9 + m
end
return out
