-- renew.lua: extend the leases this owner still holds; never creates a key.
-- KEYS[i]=lease key of session i
-- ARGV[1]=ttl in ms; then the owner values in runs: ARGV[2]=an owner
-- value, ARGV[3]=how many leases, from the first, it is for; ARGV[4],
-- ARGV[5] the same for the next leases, and so on (the counts add up to
-- #KEYS). The leases a worker acquired in one call share their owner
-- value: one argument per value rather than per lease costs Redis less
-- CPU per renewal (BenchmarkScriptRenew500).
-- returns the positions i (from 1, increasing) of the leases NOT renewed
-- (missing, or held by another owner value); an empty array when all were.
-- Every lease not listed was renewed (PEXPIRE ttl).
-- The owner values are read with MGET, a thousand keys at a time (unpack's
-- limit is ~8000): one command instead of one GET per lease costs Redis
-- ~10% less CPU per renewal cycle.
local ttl = ARGV[1]
local out = {}
local n = #KEYS
local total = 0
for j = 3, #ARGV, 2 do
  total = total + tonumber(ARGV[j])
end
if total ~= n then
  return redis.error_reply('renew: ' .. total .. ' owner values for ' .. n .. ' keys')
end
local run, left = 0, 0
for lo = 1, n, 1000 do
  local hi = math.min(lo + 999, n)
  local cur = redis.call('MGET', unpack(KEYS, lo, hi))
  for i = lo, hi do
    while left == 0 do
      run = run + 2
      left = tonumber(ARGV[run + 1])
    end
    left = left - 1
    if cur[i - lo + 1] == ARGV[run] then
      redis.call('PEXPIRE', KEYS[i], ttl)
    else
      out[#out + 1] = i
    end
  end
end
return out
