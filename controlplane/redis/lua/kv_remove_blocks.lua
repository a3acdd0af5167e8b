-- Decrement one copy of each hash, deleting fields that reach zero (atomic per call).
for i, h in ipairs(ARGV) do
  local left = redis.call('HINCRBY', KEYS[1], h, -1)
  if left <= 0 then redis.call('HDEL', KEYS[1], h) end
end
return 0
