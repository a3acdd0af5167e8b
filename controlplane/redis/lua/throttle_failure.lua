-- Count one failure; at the limit, set the lock and reset the count. Returns
-- {failures, 1 if this failure engaged the lock else 0}. One script: atomic in Redis.
-- KEYS: failures counter, lock. ARGV: window s, limit, lock s.
local n = redis.call('INCR', KEYS[1])
if n == 1 then redis.call('EXPIRE', KEYS[1], ARGV[1]) end
if n >= tonumber(ARGV[2]) then
  redis.call('SET', KEYS[2], '1', 'EX', ARGV[3])
  redis.call('DEL', KEYS[1])
  return {n, 1}
end
return {n, 0}
