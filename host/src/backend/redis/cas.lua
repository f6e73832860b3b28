-- Applies a batch of writes only if every guard still holds, atomically:
-- Rheo's optimistic transaction on Redis (`docs/backends.md#redis`). It
-- knows none of Rheo's rules; the Rust side reads, decides with the shared
-- policy, and sends what it read as guards and what it decided as writes.
--
-- ARGV[1]: JSON {"guards": [...], "writes": [...]}
--   guard ["hget", key, field, expected]  HGET must return `expected`
--                                         (JSON null: the field is absent)
--   write [command, arg, ...]             one of the commands below
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
local doc = cjson.decode(ARGV[1])
for i, guard in ipairs(doc.guards) do
  if guard[1] ~= 'hget' then
    return redis.error_reply('cas: unknown guard ' .. tostring(guard[1]))
  end
  local actual = redis.call('HGET', guard[2], guard[3])
  local expected = guard[4]
  if expected == cjson.null then
    expected = false
  end
  if actual ~= expected then
    return i
  end
end
for _, write in ipairs(doc.writes) do
  if not allowed[write[1]] then
    return redis.error_reply('cas: command not allowed: ' .. tostring(write[1]))
  end
end
for _, write in ipairs(doc.writes) do
  redis.call(unpack(write))
end
return 0
