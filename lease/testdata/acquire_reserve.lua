-- acquire_reserve.lua: experiment for BenchmarkScriptAcquireNewKeys1000:
-- the read half of a cold acquisition: the loss marker and the high-water
-- mark read once, one EXISTS over every lease and record key; returns the
-- first token of a block of n and the mark's value, or 0 when any key
-- exists.
local n = tonumber(ARGV[5])
local m = redis.call('GET', KEYS[2 * n + 1])
local high = tonumber(redis.call('GET', KEYS[2 * n + 2]) or '0')
local t = redis.call('TIME')
local nowus = tonumber(t[1]) * 1000000 + tonumber(t[2])
local chunk = {}
for i = 1, 2 * n do
  chunk[#chunk + 1] = KEYS[i]
  if #chunk >= 900 or i == 2 * n then
    if redis.call('EXISTS', unpack(chunk)) > 0 then
      return {0, 0}
    end
    chunk = {}
  end
end
return {math.max(high + 1, nowus), high}
