-- KEYS: hash of one period. ARGV: a spend delta in nanos (may be negative). Applied only to
-- a loaded hash: an unloaded one is seeded from PostgreSQL on its next load anyway.
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('HINCRBY', KEYS[1], 'spent_nanos', ARGV[1])
return 1
