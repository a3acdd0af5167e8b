"""The Redis Lua scripts behind budget holds (key layout: ``budget_reservations``).

Each runs atomically in Redis, which is what makes a hold race-free across any number of
gateway processes: the check against the limit and the increment are one step. Kept apart
from the Python that builds their KEYS and ARGV so each script reads as one unit.
"""

#: KEYS: per period (hash, holds, amounts). ARGV: hold id, amount, now ms, expiry ms.
#: Returns {1} held, {2} replay (already held), {0, index, limit, spent, reserved,
#: pg_reserved} refused by the period at ``index``, {-1, index} period not loaded.
RESERVE_SCRIPT = """
local hold, amount = ARGV[1], tonumber(ARGV[2])
local now, expires = tonumber(ARGV[3]), ARGV[4]
local periods = #KEYS / 3
for i = 0, periods - 1 do
  local h, z, a = KEYS[3 * i + 1], KEYS[3 * i + 2], KEYS[3 * i + 3]
  local stale = redis.call('ZRANGEBYSCORE', z, '-inf', now, 'LIMIT', 0, 200)
  for _, id in ipairs(stale) do
    redis.call('HINCRBY', h, 'reserved', -tonumber(redis.call('HGET', a, id) or '0'))
    redis.call('HDEL', a, id)
    redis.call('ZREM', z, id)
  end
  if redis.call('EXISTS', h) == 0 then return {-1, i} end
  if redis.call('HEXISTS', a, hold) == 1 then return {2} end
  local v = redis.call('HMGET', h, 'hard', 'limit', 'spent_nanos', 'reserved', 'pg_reserved')
  -- spent is exact nano-USD, compared in µ$ rounded half-even (as spent_micros and the
  -- REST figures round it), so "the room left" means the same everywhere.
  local n = tonumber(v[3] or '0')
  local spent = math.floor(n / 1000)
  local r = n - spent * 1000
  if r > 500 or (r == 500 and spent % 2 == 1) then spent = spent + 1 end
  local used = spent + tonumber(v[4] or '0') + tonumber(v[5] or '0')
  if v[1] == '1' and used + amount > tonumber(v[2]) then
    return {0, i, v[2], spent, v[4] or '0', v[5] or '0'}
  end
end
for i = 0, periods - 1 do
  redis.call('HINCRBY', KEYS[3 * i + 1], 'reserved', amount)
  redis.call('HSET', KEYS[3 * i + 3], hold, amount)
  redis.call('ZADD', KEYS[3 * i + 2], expires, hold)
end
return {1}
"""

#: KEYS: per period (hash, holds, amounts), then the done marker, then the settle queue.
#: ARGV: hold id, actual µ$, message (empty: a release, nothing to book), marker ttl (s),
#: pending expiry (ms). Settling spends nothing: the hold is cut to the actual cost and
#: stays, pending, until the ledger books the request (``BOOK_SCRIPT`` drops it then),
#: so the next admission sees the cost before and after the ledger has it, never twice.
SETTLE_SCRIPT = """
local hold, actual = ARGV[1], tonumber(ARGV[2])
local n = #KEYS
if redis.call('SET', KEYS[n - 1], '1', 'NX', 'EX', tonumber(ARGV[4])) == false then
  return 0
end
for i = 0, (n - 2) / 3 - 1 do
  local h, z, a = KEYS[3 * i + 1], KEYS[3 * i + 2], KEYS[3 * i + 3]
  local amount = redis.call('HGET', a, hold)
  if amount then
    redis.call('HINCRBY', h, 'reserved', -tonumber(amount))
    redis.call('HDEL', a, hold)
    redis.call('ZREM', z, hold)
  end
  if actual > 0 and redis.call('EXISTS', h) == 1 then
    redis.call('HINCRBY', h, 'reserved', actual)
    redis.call('HSET', a, hold, actual)
    redis.call('ZADD', z, ARGV[5], hold)
  end
end
if ARGV[3] ~= '' then redis.call('RPUSH', KEYS[n], ARGV[3]) end
return 1
"""

#: KEYS: hash, holds, amounts of one period, then one done marker per hold id.
#: ARGV: exact nanos booked (a decimal string; may be negative), marker ttl (s), then the
#: hold ids of the booked requests. Drops those holds (pending or still held: a settle
#: arriving later finds its marker and does nothing) and adds the nanos to
#: ``spent_nanos`` of a loaded period (an unloaded one is seeded from PostgreSQL).
BOOK_SCRIPT = """
local h, z, a = KEYS[1], KEYS[2], KEYS[3]
local loaded = redis.call('EXISTS', h) == 1
for j = 3, #ARGV do
  local id = ARGV[j]
  redis.call('SET', KEYS[j + 1], '1', 'NX', 'EX', tonumber(ARGV[2]))
  local amount = redis.call('HGET', a, id)
  if amount then
    if loaded then redis.call('HINCRBY', h, 'reserved', -tonumber(amount)) end
    redis.call('HDEL', a, id)
    redis.call('ZREM', z, id)
  end
end
if not loaded then return 0 end
redis.call('HINCRBY', h, 'spent_nanos', ARGV[1])
return 1
"""

#: KEYS: hash, holds, amounts of one period. ARGV: now ms. Drops expired holds.
EXPIRE_SCRIPT = """
local stale = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', tonumber(ARGV[1]))
for _, id in ipairs(stale) do
  redis.call('HINCRBY', KEYS[1], 'reserved', -tonumber(redis.call('HGET', KEYS[3], id) or '0'))
  redis.call('HDEL', KEYS[3], id)
  redis.call('ZREM', KEYS[2], id)
end
return #stale
"""

#: KEYS: hash of one period. ARGV: a spend delta in nanos (may be negative). Applied only
#: to a loaded hash: an unloaded one is seeded from PostgreSQL on its next load anyway.
ADJUST_SCRIPT = """
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('HINCRBY', KEYS[1], 'spent_nanos', ARGV[1])
return 1
"""

#: Moves up to ARGV[1] settlements into a batch list registered with its claim time.
CLAIM_SCRIPT = """
local items = redis.call('LRANGE', KEYS[1], 0, tonumber(ARGV[1]) - 1)
if #items == 0 then return 0 end
redis.call('LTRIM', KEYS[1], #items, -1)
for i = 1, #items, 1000 do
  redis.call('RPUSH', KEYS[2], unpack(items, i, math.min(i + 999, #items)))
end
redis.call('ZADD', KEYS[3], ARGV[2], KEYS[2])
return #items
"""
