-- unheld.lua: read-only check of which of several leases nobody holds.
-- KEYS[i]=lease key of session i
-- returns the positions (1-based) of the keys that do not exist, in order;
-- usually empty, so the reply stays small however many keys are checked.
local out = {}
for i = 1, #KEYS do
  if redis.call('EXISTS', KEYS[i]) == 0 then
    out[#out + 1] = i
  end
end
return out
