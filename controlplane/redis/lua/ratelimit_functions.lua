-- Lua functions of the rate-limit step, run inside the gateway's admission script
-- (gateway_admit.lua) together with the budget hold, so both are one atomic step.
-- KEYS per scope: bucket hash, in-flight sorted set. ARGV: now ms, call id, tokens,
-- slot expiry ms, then per scope: rpm, tpm, concurrency (0: unlimited).
-- ``rl_check`` writes nothing: it returns {0, scope, kind (1 requests, 2 tokens,
-- 3 concurrency, 4 too large), retry ms, limit} for a refusal, else nil and the state
-- ``rl_take`` applies (``requests_only``: just the request, for a call a later check
-- refused). ``rl_take`` returns {1, remaining requests, remaining tokens, ...per scope}.
-- ``rl_finish`` (KEYS as above; ARGV: call id, token correction (estimate - actual),
-- now ms, then per scope: tpm) frees the slot and corrects the token bucket.
local function rl_check(KEYS, ARGV)
  local now, cost = tonumber(ARGV[1]), tonumber(ARGV[3])
  local state = {}
  for i = 0, #KEYS / 2 - 1 do
    local b, z = KEYS[2 * i + 1], KEYS[2 * i + 2]
    local rpm, tpm = tonumber(ARGV[5 + 3 * i]), tonumber(ARGV[6 + 3 * i])
    local conc = tonumber(ARGV[7 + 3 * i])
    local v = redis.call('HMGET', b, 'r', 'rts', 't', 'tts')
    local r, t = rpm, tpm
    if rpm > 0 and v[1] then
      r = math.min(rpm, tonumber(v[1]) + (now - tonumber(v[2])) * rpm / 60000)
    end
    if tpm > 0 and v[3] then
      t = math.min(tpm, tonumber(v[3]) + (now - tonumber(v[4])) * tpm / 60000)
    end
    if rpm > 0 and r < 1 then
      return {0, i, 1, math.ceil((1 - r) * 60000 / rpm), rpm}, nil
    end
    if tpm > 0 and cost > tpm then return {0, i, 4, 60000, tpm}, nil end
    if tpm > 0 and t < cost then
      return {0, i, 2, math.ceil((cost - t) * 60000 / tpm), tpm}, nil
    end
    if conc > 0 then
      redis.call('ZREMRANGEBYSCORE', z, '-inf', now)
      if redis.call('ZCARD', z) >= conc then return {0, i, 3, 1000, conc}, nil end
    end
    state[i] = {r, t, rpm, tpm, conc}
  end
  return nil, state
end

local function rl_take(KEYS, ARGV, state, requests_only)
  local id, cost, expires = ARGV[2], tonumber(ARGV[3]), ARGV[4]
  local out = {1}
  for i = 0, #KEYS / 2 - 1 do
    local b, z = KEYS[2 * i + 1], KEYS[2 * i + 2]
    local s = state[i]
    local tokens = s[4] > 0 and not requests_only
    if s[3] > 0 then redis.call('HSET', b, 'r', tostring(s[1] - 1), 'rts', ARGV[1]) end
    if tokens then redis.call('HSET', b, 't', tostring(s[2] - cost), 'tts', ARGV[1]) end
    if s[3] > 0 or tokens then redis.call('PEXPIRE', b, 120000) end
    if s[5] > 0 and not requests_only then
      redis.call('ZADD', z, expires, id)
      redis.call('PEXPIRE', z, 3600000)
    end
    out[#out + 1] = math.floor(s[1] - 1)
    out[#out + 1] = math.floor(s[2] - cost)
  end
  return out
end

local function rl_finish(KEYS, ARGV)
  local id, refund, now = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
  for i = 0, #KEYS / 2 - 1 do
    local b, z = KEYS[2 * i + 1], KEYS[2 * i + 2]
    redis.call('ZREM', z, id)
    local tpm = tonumber(ARGV[4 + i])
    if tpm > 0 and refund ~= 0 then
      local v = redis.call('HMGET', b, 't', 'tts')
      if v[1] then
        local t = math.min(tpm, tonumber(v[1]) + (now - tonumber(v[2])) * tpm / 60000 + refund)
        redis.call('HSET', b, 't', tostring(t), 'tts', ARGV[3])
      end
    end
  end
  return 1
end
