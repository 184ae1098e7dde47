-- renew.lua: extend the leases this owner still holds; never creates a key.
-- KEYS[i]=lease key of session i
-- ARGV[1]=ttl in ms; ARGV[1+i]=owner value of lease i
-- returns an array of integers: 1 renewed, 0 not renewed (missing, or held
-- by another owner value)
local ttl = ARGV[1]
local out = {}
for i = 1, #KEYS do
  if redis.call('GET', KEYS[i]) == ARGV[1 + i] then
    redis.call('PEXPIRE', KEYS[i], ttl)
    out[i] = 1
  else
    out[i] = 0
  end
end
return out
