-- Runs ``op`` (a Lua function of its own KEYS and ARGV, defined by the including script
-- before this line) for a batch of callers. ARGV: count, then (keys, args) sizes per call,
-- then every call's args in order; KEYS: every call's keys in order. Returns one reply
-- per call. The including script includes it last.
local count = tonumber(ARGV[1])
local out = {}
local k, a = 0, 1 + 2 * count
for i = 1, count do
  local nk, na = tonumber(ARGV[2 * i]), tonumber(ARGV[2 * i + 1])
  local keys, args = {}, {}
  for j = 1, nk do keys[j] = KEYS[k + j] end
  for j = 1, na do args[j] = ARGV[a + j] end
  k, a = k + nk, a + na
  out[i] = op(keys, args)
end
return out
