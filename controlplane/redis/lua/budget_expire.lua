-- KEYS: hash, holds, amounts of one period. ARGV: now ms. Drops expired holds.
local stale = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', tonumber(ARGV[1]))
for _, id in ipairs(stale) do
  redis.call('HINCRBY', KEYS[1], 'reserved', -tonumber(redis.call('HGET', KEYS[3], id) or '0'))
  redis.call('HDEL', KEYS[3], id)
  redis.call('ZREM', KEYS[2], id)
end
return #stale
