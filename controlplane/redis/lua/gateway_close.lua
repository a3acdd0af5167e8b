-- The gateway's closing step, batched (controlplane.redis.gateway.Close): per request, the
-- rate-limit slot and token correction (``rl_finish``) and billing's settle script.
-- Per call: KEYS: rate-limit keys (2 per scope), then the settle script's KEYS. ARGV:
-- scopes, settle keys, ``rl_finish``'s ARGV (when scopes), the settle script's ARGV (when
-- settle keys). Returns the settle script's reply (0 without a hold).
-- #include ratelimit_functions.lua
local function budget_settle(KEYS, ARGV)
-- #include budget_settle.lua
end
local function op(KEYS, ARGV)
local ns, nb = tonumber(ARGV[1]), tonumber(ARGV[2])
local rk, ra, bk, ba = {}, {}, {}, {}
for i = 1, 2 * ns do rk[i] = KEYS[i] end
for i = 1, nb do bk[i] = KEYS[2 * ns + i] end
local nra = 0
if ns > 0 then nra = 3 + ns end
for i = 1, nra do ra[i] = ARGV[2 + i] end
for i = 1, #ARGV - 2 - nra do ba[i] = ARGV[2 + nra + i] end
if ns > 0 then rl_finish(rk, ra) end
if nb > 0 then return budget_settle(bk, ba) end
return 0
end
-- #include batch_run.lua
