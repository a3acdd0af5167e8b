-- The gateway's admission step, batched (controlplane.redis.gateway.Admit): per request,
-- the rate limits (ratelimit_functions.lua) and billing's budget hold (budget_reserve.lua),
-- one atomic step each.
-- Per call: KEYS: rate-limit keys (2 per scope), then the budget periods' keys (3 per
-- period). ARGV: scopes, periods, then ``rl_check``'s ARGV (when scopes), then the reserve
-- script's ARGV (when periods). Returns {0, rl_take's reply} admitted,
-- {1, rl_check's refusal} or {2, the reserve script's reply} refused.
-- #include ratelimit_functions.lua
local function budget_reserve(KEYS, ARGV)
-- #include budget_reserve.lua
end
local function op(KEYS, ARGV)
local ns, np = tonumber(ARGV[1]), tonumber(ARGV[2])
local rk, ra, bk, ba = {}, {}, {}, {}
for i = 1, 2 * ns do rk[i] = KEYS[i] end
for i = 1, 3 * np do bk[i] = KEYS[2 * ns + i] end
local nra = 0
if ns > 0 then nra = 4 + 3 * ns end
for i = 1, nra do ra[i] = ARGV[2 + i] end
for i = 1, #ARGV - 2 - nra do ba[i] = ARGV[2 + nra + i] end
local state
if ns > 0 then
  local refused
  refused, state = rl_check(rk, ra)
  if refused then return {1, refused} end
end
if np > 0 then
  local held = budget_reserve(bk, ba)
  if held[1] == 0 then
    if ns > 0 then rl_take(rk, ra, state, true) end
    return {2, held}
  end
  if held[1] == -1 then return {2, held} end
end
if ns > 0 then return {0, rl_take(rk, ra, state, false)} end
return {0, {1}}
end
-- #include batch_run.lua
