-- KEYS: a pending hash. ARGV: now. Deletes claims that expired.
local all = redis.call('HGETALL', KEYS[1])
local gone = 0
for i = 1, #all, 2 do
  if tonumber(all[i + 1]) < tonumber(ARGV[1]) then
    redis.call('HDEL', KEYS[1], all[i])
    gone = gone + 1
  end
end
return gone
