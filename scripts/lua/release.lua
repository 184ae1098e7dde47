-- release.lua: delete the leases this owner still holds, and only those,
-- and leave a handoff mark for each successor.
-- KEYS[2i-1]=lease key of session i, KEYS[2i]=its handoff mark (same slot)
-- ARGV[1]=lifetime of a handoff mark in ms; ARGV[1+i]=owner value of lease i
-- returns an array of integers: 1 deleted, 0 not ours (missing or another owner)
-- A deleted lease's mark is set to the release time (Redis TIME, in ms) with
-- PX ARGV[1]; acquire.lua reads and deletes it to report the handoff gap.
local life = ARGV[1]
local now
local out = {}
for i = 1, #KEYS / 2 do
  local lease, mark = KEYS[2 * i - 1], KEYS[2 * i]
  if redis.call('GET', lease) == ARGV[1 + i] then
    redis.call('DEL', lease)
    if now == nil then
      local t = redis.call('TIME')
      now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    end
    redis.call('SET', mark, string.format('%d', now), 'PX', life)
    out[i] = 1
  else
    out[i] = 0
  end
end
return out
