-- inspect.lua: read-only look at several leases and the keys beside them.
-- KEYS[3i-2]=lease key of session i, KEYS[3i-1]=its fencing counter,
-- KEYS[3i]=its handoff mark (all three in one slot)
-- returns a flat array, three entries per session: owner value (false/nil
-- if none, or if the lease key is not a string), remaining ms of the lease
-- key (PTTL: -2 missing, -1 no expiry), and false, or the first problem
-- that keeps acquire.lua from taking the lease: "ROLE:problem" where ROLE
-- is lease, fence or mark and problem is as acquire.lua reports it ("wrong
-- type hash", a counter "not a decimal integer: ..." or "at or above
-- 2^53-1: ...").
local safe = 9007199254740991 -- 2^53 - 1, as acquire.lua
-- get reads a key that should be a string, as acquire.lua does: its value
-- (false when missing), or nil and 'wrong type <type>'. TYPE only runs
-- for a bad key, and may be refused (an ACL without +type).
local function get(key)
  local v = redis.pcall('GET', key)
  if type(v) == 'table' then
    local t = redis.pcall('TYPE', key)
    return nil, 'wrong type ' .. (type(t) == 'table' and t['ok'] or 'unknown')
  end
  return v
end
local function problem(lease, fence, mark)
  local v, bad = get(lease)
  if v == nil then
    return 'lease:' .. bad
  end
  v, bad = get(fence)
  if v == nil then
    return 'fence:' .. bad
  elseif v and not string.match(v, '^%d+$') then
    return 'fence:not a decimal integer: ' .. string.sub(v, 1, 40)
  elseif v and (#v > 16 or tonumber(v) >= safe) then
    return 'fence:at or above 2^53-1: ' .. string.sub(v, 1, 40)
  end
  v, bad = get(mark)
  if v == nil then
    return 'mark:' .. bad
  end
  return false
end
local out = {}
for i = 1, #KEYS / 3 do
  local lease = KEYS[3 * i - 2]
  local bad = problem(lease, KEYS[3 * i - 1], KEYS[3 * i])
  out[3 * i - 2] = get(lease) or false
  out[3 * i - 1] = redis.call('PTTL', lease)
  out[3 * i] = bad
end
return out
