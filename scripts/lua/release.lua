-- release.lua: delete the leases this owner still holds, and only those.
-- KEYS[i]=lease key of session i
-- ARGV[i]=owner value of lease i
-- returns an array of integers: 1 deleted, 0 not ours (missing or another owner)
local out = {}
for i = 1, #KEYS do
  if redis.call('GET', KEYS[i]) == ARGV[i] then
    redis.call('DEL', KEYS[i])
    out[i] = 1
  else
    out[i] = 0
  end
end
return out
