-- Budget hold: reserve ``amount`` on every period that applies, or refuse (billing's logic;
-- key layout: controlplane.redis.keys.BudgetKeys). Atomic in Redis: the check against the
-- limit and the increment are one step, across any number of gateway processes.
-- KEYS: per period (hash, holds, amounts). ARGV: hold id, amount, now ms, expiry ms.
-- Returns {1} held, {2} replay (already held), {0, index, limit, spent µ$ (spent_nanos
-- rounded half-even, as spent_micros), reserved,
-- pg_reserved} refused by the period at ``index``, {-1, index} period not loaded.
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
