-- Applies a batch of writes only if every guard still holds, atomically:
-- Rheo's optimistic transaction on Redis (`docs/backends.md#redis`). It
-- knows none of Rheo's rules; the Rust side reads, decides with the shared
-- policy, and sends what it read as guards and what it decided as writes.
--
-- ARGV, flat (no JSON to decode):
--   ARGV[1]            the number of guards, G
--   then G guards      key, field, "1" and the value HGET must return,
--                      or "0" and "" when the field must be absent
--   then the writes    each: its argument count n, then n arguments
--                      (the command, one of those below, and its arguments)
-- Returns 0 when everything was written, else the 1-based index of the
-- first guard that failed (nothing written).
--
-- Every write is checked before the first one runs, so a bad batch writes
-- nothing. A write that Redis refuses after others ran (only XADD could, if
-- an entry id were not above the stream's last one) would leave the earlier
-- writes in place: the guards on each partition's high watermark, which
-- names the last entry id, are what rule that out.
local allowed = {
  HSET = true, HDEL = true, HINCRBY = true,
  ZADD = true, ZREM = true,
  XADD = true,
  DEL = true,
}
local guards = tonumber(ARGV[1])
local i = 2
for g = 1, guards do
  local actual = redis.call('HGET', ARGV[i], ARGV[i + 1])
  local expected = false
  if ARGV[i + 2] == '1' then
    expected = ARGV[i + 3]
  end
  if actual ~= expected then
    return g
  end
  i = i + 4
end
local first = i
while i <= #ARGV do
  local n = tonumber(ARGV[i])
  if not allowed[ARGV[i + 1]] then
    return redis.error_reply('cas: command not allowed: ' .. tostring(ARGV[i + 1]))
  end
  i = i + 1 + n
end
i = first
while i <= #ARGV do
  local n = tonumber(ARGV[i])
  redis.call(unpack(ARGV, i + 1, i + n))
  i = i + 1 + n
end
return 0
