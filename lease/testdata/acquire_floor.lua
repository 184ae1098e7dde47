-- acquire_floor.lua: the least any acquire script costs Redis, for
-- BenchmarkScriptAcquireNewKeys1000 only: the keys and arguments of
-- acquire.lua, and per session only SET NX PX of its lease with the call's
-- owner value and a reply of four values. No token high-water mark, no
-- fencing record, no loss marker: not safe, a yardstick.
local n = tonumber(ARGV[5])
local ttl, me = ARGV[1], ARGV[4]
local t = redis.call('TIME')
local nowus = tonumber(t[1]) * 1000000 + tonumber(t[2])
local out = {}
for i = 1, n do
  if redis.call('SET', KEYS[2 * i - 1], me, 'NX', 'PX', ttl) then
    out[4 * i - 3], out[4 * i - 2], out[4 * i - 1], out[4 * i] = nowus + i, 0, -1, -1
  else
    out[4 * i - 3], out[4 * i - 2], out[4 * i - 1], out[4 * i] = 0, 0, 'held', 0
  end
end
return out
