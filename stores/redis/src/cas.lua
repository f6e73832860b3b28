-- Applies a batch of writes only if every guard still holds, atomically:
-- Rheo's optimistic transaction on Redis (`docs/backends.md#redis`). It
-- knows none of Rheo's rules; the Rust side reads, decides with the shared
-- policy, and sends what it read as guards and what it decided as writes.
--
-- ARGV, flat (no JSON to decode):
--   ARGV[1]          the number of guard groups, G
--   then G groups    "h", a hash's key, a count n, then n guards on its
--                    fields: field, then "1" and the value it must hold,
--                    "2" and a prefix its value must start with, or "0"
--                    and "" when it must be absent (read with one HMGET);
--                    or "z", a sorted set's key and a score: the set has
--                    no member scored at most that;
--                    or "l", a sorted set's key, a lex range (min, max), a
--                    count n, a count m and m members: the range's first
--                    n members (ZRANGEBYLEX ... LIMIT 0 n) are exactly those;
--                    or "e", a sorted set's key, a count n and n lex ranges
--                    (min, max): each range has no member;
--                    or "s", a sorted set's key, a count n and n triples
--                    (min, max, member): each range holds one member — that
--                    one, which the caller guards otherwise (a gate's head
--                    is its member while its record says it is leased, and
--                    a guard on the record comes with this one);
--                    or "n", a hash's key and a count: the hash has exactly
--                    that many fields;
--                    or "c", a sorted set's key, a count n and n pairs
--                    (member, score): each member has that score, compared
--                    as a number, or is no member when the score is ""
--                    (a key-rate group's TATs; ZMSCORE, Redis 6.2)
--   then the writes  each: its argument count n, then n arguments (the
--                    command, one of those below, and its arguments)
-- Two shorthands keep long batches short: `ZADD* key score m1 m2 ...` adds
-- every member with one score, `ZADD= key m1 m2 ...` scores each member
-- by itself. Both add the members last to first: a small sorted set is a
-- list that Redis scans from its head for the place of each new member, and
-- the members come in ascending order, so each one then goes to the head.
-- Returns 0 when everything was written, else the 1-based index of the
-- first guard group that failed (nothing written).
--
-- PUBLISH, the one write that is not to a key, tells other nodes of a
-- batch that made something claimable (their wake-ups). UNLINK and INCR
-- are a delete's (`lifecycle.rs`): its keys, and the catalog generation.
-- XTRIM (`XTRIM key MINID id`) is a trim's (`retention.rs`): the events
-- below the partition's new first sequence. ZREMRANGEBYSCORE and
-- `PEXPIRE> key ms` are a key-rate fetch's (`Keys::tats`): the TATs long
-- passed, and a time to live for the set of them that only ever grows
-- (`PEXPIRE` unless the key already lives at least `ms`; `GT` is Redis 7).
--
-- Every write is checked before the first one runs, so a bad batch writes
-- nothing. A write that Redis refuses after others ran (only XADD could, if
-- an entry id were not above the stream's last one) would leave the earlier
-- writes in place: the guards on each partition's high watermark, which
-- names the last entry id, are what rule that out.
local allowed = {
  HSET = true, HDEL = true, HINCRBY = true,
  ZADD = true, ZREM = true, ['ZADD*'] = true, ['ZADD='] = true,
  XADD = true, XTRIM = true,
  ZREMRANGEBYSCORE = true, ['PEXPIRE>'] = true,
  DEL = true, UNLINK = true,
  INCR = true,
  PUBLISH = true,
}
local groups = tonumber(ARGV[1])
local i = 2
for g = 1, groups do
  local key = ARGV[i + 1]
  if ARGV[i] == 'n' then
    if redis.call('HLEN', key) ~= tonumber(ARGV[i + 2]) then
      return g
    end
    i = i + 3
  elseif ARGV[i] == 'z' then
    if #redis.call('ZRANGEBYSCORE', key, '-inf', ARGV[i + 2], 'LIMIT', 0, 1) > 0 then
      return g
    end
    i = i + 3
  elseif ARGV[i] == 'e' then
    local n = tonumber(ARGV[i + 2])
    for j = 0, n - 1 do
      local at = i + 3 + 2 * j
      if redis.call('ZLEXCOUNT', key, ARGV[at], ARGV[at + 1]) ~= 0 then
        return g
      end
    end
    i = i + 3 + 2 * n
  elseif ARGV[i] == 's' then
    local n = tonumber(ARGV[i + 2])
    for j = 0, n - 1 do
      local at = i + 3 + 3 * j
      if redis.call('ZLEXCOUNT', key, ARGV[at], ARGV[at + 1]) ~= 1 then
        return g
      end
    end
    i = i + 3 + 3 * n
  elseif ARGV[i] == 'c' then
    local n = tonumber(ARGV[i + 2])
    local members = {}
    for j = 1, n do
      members[j] = ARGV[i + 1 + 2 * j]
    end
    local scores = redis.call('ZMSCORE', key, unpack(members))
    for j = 1, n do
      local actual, expected = scores[j], ARGV[i + 2 + 2 * j]
      if expected == '' then
        if actual then
          return g
        end
      elseif not actual or tonumber(actual) ~= tonumber(expected) then
        return g
      end
    end
    i = i + 3 + 2 * n
  elseif ARGV[i] == 'l' then
    local found = redis.call('ZRANGEBYLEX', key, ARGV[i + 2], ARGV[i + 3], 'LIMIT', 0, tonumber(ARGV[i + 4]))
    local m = tonumber(ARGV[i + 5])
    if #found ~= m then
      return g
    end
    for j = 1, m do
      if found[j] ~= ARGV[i + 5 + j] then
        return g
      end
    end
    i = i + 6 + m
  else
    local n = tonumber(ARGV[i + 2])
    local fields = {}
    for j = 1, n do
      fields[j] = ARGV[i + 3 * j]
    end
    local values = redis.call('HMGET', key, unpack(fields))
    for j = 1, n do
      local at = i + 3 * j
      local actual, kind, expected = values[j], ARGV[at + 1], ARGV[at + 2]
      local holds
      if kind == '1' then
        holds = actual == expected
      elseif kind == '2' then
        holds = actual and string.sub(actual, 1, #expected) == expected
      else
        holds = actual == false
      end
      if not holds then
        return g
      end
    end
    i = i + 3 + 3 * n
  end
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
  local name = ARGV[i + 1]
  if name == 'ZADD*' then
    local args, score = {}, ARGV[i + 3]
    for j = i + n, i + 4, -1 do
      args[#args + 1] = score
      args[#args + 1] = ARGV[j]
    end
    redis.call('ZADD', ARGV[i + 2], unpack(args))
  elseif name == 'PEXPIRE>' then
    local ms = tonumber(ARGV[i + 3])
    local left = redis.call('PTTL', ARGV[i + 2])
    if left == -1 or (left >= 0 and left < ms) then
      redis.call('PEXPIRE', ARGV[i + 2], ms)
    end
  elseif name == 'ZADD=' then
    local args = {}
    for j = i + n, i + 3, -1 do
      args[#args + 1] = ARGV[j]
      args[#args + 1] = ARGV[j]
    end
    redis.call('ZADD', ARGV[i + 2], unpack(args))
  else
    redis.call(unpack(ARGV, i + 1, i + n))
  end
  i = i + 1 + n
end
return 0
