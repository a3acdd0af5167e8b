-- The hot path's routing step (documented with its KEYS and ARGV in workers.kv_route and
-- controlplane.redis.fleet.KvRoute).
local now = tonumber(ARGV[1])
local workers, hashes, mine, cool = {}, {}, {}, {}
for w in string.gmatch(ARGV[6], '%S+') do workers[#workers + 1] = w end
for h in string.gmatch(ARGV[7], '%S+') do hashes[#hashes + 1] = h end
for x in string.gmatch(ARGV[9], '%S+') do mine[#mine + 1] = tonumber(x) end
for x in string.gmatch(ARGV[10], '%S+') do cool[#cool + 1] = (x == '1') end
local n = #workers
local fresh = 1
if n == 0 then fresh = 0 else
  local stamps = redis.call('HMGET', KEYS[1], unpack(workers))
  for i = 1, n do
    if not stamps[i] or now - tonumber(stamps[i]) > tonumber(ARGV[2]) then fresh = 0 end
  end
end
redis.call('HSET', KEYS[2], ARGV[4], ARGV[1])
local live = {}
local beats = redis.call('HGETALL', KEYS[2])
for i = 1, #beats, 2 do
  if now - tonumber(beats[i + 1]) <= tonumber(ARGV[3]) then live[beats[i]] = true end
end
local fleet = {}
local inflight = redis.call('HGETALL', KEYS[3])
for i = 1, #inflight, 2 do
  local f = inflight[i]
  local sep = string.find(f, '|', 1, true)
  if sep and live[string.sub(f, 1, sep - 1)] then
    local w = string.sub(f, sep + 1)
    local c = tonumber(inflight[i + 1]) or 0
    if c > 0 then fleet[w] = (fleet[w] or 0) + c end
  else
    redis.call('HDEL', KEYS[3], f)  -- a dead replica's counts stop counting
  end
end
local out = {fresh}
local held, score, load = {}, {}, {}
local best, total, anycool = 0, 0, false
for i, w in ipairs(workers) do
  local key, pkey, rkey = ARGV[5] .. 'w:' .. w, ARGV[5] .. 'p:' .. w, ARGV[8] .. w
  -- One HMGET per key (a C loop) instead of a call per block, and none at all where
  -- the first block that matters is absent (most workers, for most prompts).
  local h, c, got = 0, 0, {}
  if #hashes > 0 and redis.call('HEXISTS', key, hashes[1]) == 1 then
    got = redis.call('HMGET', key, unpack(hashes))
    while h < #hashes and got[h + 1] do h = h + 1 end
  end
  c = h
  if c < #hashes and redis.call('HEXISTS', pkey, hashes[h + 1]) == 1 then
    local till = redis.call('HMGET', pkey, unpack(hashes, h + 1))
    while c < #hashes do
      if not got[c + 1] then
        local t = till[c + 1 - h]
        if not t or tonumber(t) < now then break end
      end
      c = c + 1
    end
  end
  redis.call('ZREMRANGEBYSCORE', rkey, '-inf', now)
  local l = (fleet[w] or 0) + redis.call('ZCARD', rkey)
  held[i], score[i] = h, c
  load[i] = math.max(l, mine[i] or 0)  -- this replica's own count is newer
  best = math.max(best, c)
  total = total + load[i]
  if cool[i] then anycool = true end
  out[#out + 1] = h
  out[#out + 1] = c
  out[#out + 1] = l
end
if fresh == 0 or ARGV[17] ~= '1' then return out end
local decay = 1 - 1 / tonumber(ARGV[18])
local seq = tonumber(redis.call('GET', KEYS[5]) or '0')
local stored = redis.call('HMGET', KEYS[4], unpack(workers))
local rate, rtotal = {}, 0
for i = 1, n do
  local v = 0
  if stored[i] then
    local val, g = string.match(stored[i], '(%S+) (%S+)')
    v = tonumber(val) * decay ^ (seq - tonumber(g))
  end
  rate[i] = v
  rtotal = rtotal + v
end
local prior = tonumber(ARGV[21])
local mean = (rtotal + 1) / n
local rbound = tonumber(ARGV[19]) * (mean + prior) - prior
local bound = math.ceil((1 + tonumber(ARGV[12])) * (total + 1) / n)
local function usable(i) return cool[i] or not anycool end
-- Within both bounds: in flight (instantaneous) and the decayed request count (the
-- share of traffic, what balance is about), each with a prior of ARGV[21] requests.
local function within(i) return usable(i) and load[i] + 1 <= bound and rate[i] + 1 <= rbound end
local order, rest = {}, {}
local lambda = tonumber(ARGV[20])
local value = {}
-- A prompt mostly new to every worker is a placement: by load alone (its future turns
-- follow it, so it should land where traffic is lightest).
local placing = #hashes == 0 or best < tonumber(ARGV[11]) * #hashes
for i = 1, n do
  local share = 0
  if not placing then share = score[i] / #hashes end
  value[i] = share - lambda * (rate[i] + 1 - mean) / (mean + prior)
  if within(i) then order[#order + 1] = i else rest[#rest + 1] = i end
end
local function better(a, b)
  if value[a] ~= value[b] then return value[a] > value[b] end
  return a < b
end
table.sort(order, better)
table.sort(rest, better)
for _, i in ipairs(rest) do order[#order + 1] = i end
local chosen = order[1]
local w = workers[chosen]
redis.call('SET', KEYS[5], seq + 1, 'EX', 3600)
redis.call('HSET', KEYS[4], w, string.format('%.6f %d', rate[chosen] * decay + 1, seq + 1))
redis.call('EXPIRE', KEYS[4], 3600)
local args = {}
for j = held[chosen] + 1, #hashes do
  args[#args + 1] = hashes[j]
  args[#args + 1] = ARGV[13]
end
if #args > 0 then
  redis.call('HSET', ARGV[5] .. 'p:' .. w, unpack(args))
  redis.call('EXPIRE', ARGV[5] .. 'p:' .. w, ARGV[14])
end
redis.call('ZADD', ARGV[8] .. w, ARGV[15], ARGV[16])
redis.call('EXPIRE', ARGV[8] .. w, ARGV[14])
for _, i in ipairs(order) do out[#out + 1] = i end
return out
