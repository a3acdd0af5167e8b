-- Budget settle: drop a hold and book what the request actually cost (billing's logic).
-- KEYS: per period (hash, holds, amounts), then the done marker, then the settle queue.
-- ARGV: hold id, actual, message (empty: a release, nothing to book), marker ttl (s).
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
  if actual > 0 then redis.call('HINCRBY', h, 'spent', actual) end
end
if ARGV[3] ~= '' then redis.call('RPUSH', KEYS[n], ARGV[3]) end
return 1
