-- Count one refusal; when the audit gate is open, close it and return the count to
-- record (else 0), so one row per gate period carries every refusal.
-- KEYS: refusal counter, audit gate. ARGV: gate s, counter ttl s.
local n = redis.call('INCR', KEYS[1])
redis.call('EXPIRE', KEYS[1], ARGV[2])
if redis.call('SET', KEYS[2], '1', 'NX', 'EX', ARGV[1]) then
  redis.call('DEL', KEYS[1])
  return n
end
return 0
