-- acquire.lua: take the leases of several sessions at once.
-- KEYS[2i-1]=lease key of session i, KEYS[2i]=its fencing counter (same hash slot)
-- ARGV[1]=ttl in ms; ARGV[1+i]=owner value for session i (unique per acquisition)
-- returns a flat array, two integers per session:
--   token, 0      acquired now (token = INCR of the fencing counter), or
--                 already held by this owner value (a retried request): the
--                 TTL is set again (the caller counts its deadline from the
--                 retry) and the token is the current counter, which is this
--                 acquisition's; if the counter was lost (eviction,
--                 failover) it is incremented again rather than guessed
--   0, pttl       held by another owner; pttl = its remaining ms (-1 if none)
-- The counter never expires and is only ever incremented, so tokens of one
-- session strictly increase across acquisitions, expiries and script flushes.
local ttl = ARGV[1]
local out = {}
for i = 1, #KEYS / 2 do
  local lease, fence, me = KEYS[2 * i - 1], KEYS[2 * i], ARGV[1 + i]
  local cur = redis.call('GET', lease)
  if cur == false then
    local token = redis.call('INCR', fence)
    redis.call('SET', lease, me, 'PX', ttl)
    out[#out + 1] = token
    out[#out + 1] = 0
  elseif cur == me then
    redis.call('PEXPIRE', lease, ttl)
    local token = tonumber(redis.call('GET', fence))
    if token == nil then
      token = redis.call('INCR', fence)
    end
    out[#out + 1] = token
    out[#out + 1] = 0
  else
    out[#out + 1] = 0
    out[#out + 1] = redis.call('PTTL', lease)
  end
end
return out
