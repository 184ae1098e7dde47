-- inspect.lua: read-only look at several leases.
-- KEYS[i]=lease key of session i
-- returns a flat array, two entries per lease: owner value (false/nil if
-- none), remaining ms (PTTL: -2 missing, -1 no expiry)
local out = {}
for i = 1, #KEYS do
  local v = redis.call('GET', KEYS[i])
  out[2 * i - 1] = v
  out[2 * i] = redis.call('PTTL', KEYS[i])
end
return out
