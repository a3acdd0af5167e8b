-- Budget book: the ledger booked requests (and costs) on one period (billing's logic:
-- billing.services.ledger_booking, the one booking path).
-- KEYS: hash, holds, amounts of one period, then one done marker per hold id.
-- ARGV: exact nanos booked (a decimal string; may be negative), marker ttl (s), then the
-- hold ids of the booked requests. Drops those holds (pending or still held: a settle
-- arriving later finds its marker and does nothing) and adds the nanos to spent_nanos of
-- a loaded period (an unloaded one is seeded from PostgreSQL on its next load).
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
