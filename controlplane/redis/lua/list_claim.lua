-- Moves up to ARGV[1] items of the list KEYS[1] into the batch list KEYS[2] and registers
-- the batch in the sorted set KEYS[3] with its claim time ARGV[2]. Returns how many.
-- (The usage queue and the budget settle queue, both flushed in claimed batches.)
local items = redis.call('LRANGE', KEYS[1], 0, tonumber(ARGV[1]) - 1)
if #items == 0 then return 0 end
redis.call('LTRIM', KEYS[1], #items, -1)
for i = 1, #items, 1000 do
  redis.call('RPUSH', KEYS[2], unpack(items, i, math.min(i + 999, #items)))
end
redis.call('ZADD', KEYS[3], ARGV[2], KEYS[2])
return #items
