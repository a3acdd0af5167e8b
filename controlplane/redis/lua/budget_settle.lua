-- Budget settle: cut a hold to what the request actually cost, pending the ledger (billing's
-- logic). Settling spends nothing: the hold stays, pending, until the ledger books the
-- request (budget_book.lua drops it then), so the next admission sees the cost before and
-- after the ledger has it, never twice.
-- KEYS: per period (hash, holds, amounts), then the done marker, then the settle queue.
-- ARGV: hold id, actual µ$, message (empty: a release), marker ttl (s), pending expiry (ms).
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
