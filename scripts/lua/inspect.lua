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
local function kind(key)
  return redis.call('TYPE', key)['ok']
end
local function problem(lease, fence, mark)
  local t = kind(lease)
  if t ~= 'none' and t ~= 'string' then
    return 'lease:wrong type ' .. t
  end
  t = kind(fence)
  if t ~= 'none' and t ~= 'string' then
    return 'fence:wrong type ' .. t
  elseif t == 'string' then
    local v = redis.call('GET', fence)
    if not string.match(v, '^%d+$') then
      return 'fence:not a decimal integer: ' .. string.sub(v, 1, 40)
    elseif #v > 16 or tonumber(v) >= safe then
      return 'fence:at or above 2^53-1: ' .. string.sub(v, 1, 40)
    end
  end
  t = kind(mark)
  if t ~= 'none' and t ~= 'string' then
    return 'mark:wrong type ' .. t
  end
  return false
end
local out = {}
for i = 1, #KEYS / 3 do
  local lease = KEYS[3 * i - 2]
  local bad = problem(lease, KEYS[3 * i - 1], KEYS[3 * i])
  local v = false
  if kind(lease) == 'string' then
    v = redis.call('GET', lease)
  end
  out[3 * i - 2] = v
  out[3 * i - 1] = redis.call('PTTL', lease)
  out[3 * i] = bad
end
return out
