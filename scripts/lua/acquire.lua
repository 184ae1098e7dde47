-- acquire.lua: take the leases of several sessions at once.
-- KEYS[3i-2]=lease key of session i, KEYS[3i-1]=its fencing counter,
-- KEYS[3i]=its handoff mark (written by release.lua); all three in one slot
-- ARGV[1]=ttl in ms; ARGV[1+i]=owner value for session i (unique per acquisition)
-- returns a flat array, four values per session:
--   token, 0, gap, due  acquired now (token = INCR of the fencing counter);
--                 gap is the ms since the previous holder released the lease
--                 (from the handoff mark, which is consumed), or -1 when
--                 there is no mark (first acquisition, previous lease
--                 expired, or the release is older than the mark's
--                 lifetime); due is the ms until the session's next poll
--                 was due on the previous holder's schedule (0 if overdue),
--                 or -1 when the mark does not say
--   token, 0, -1, -1  already held by this owner value (a retried request):
--                 the TTL is set again (the caller counts its deadline from
--                 the retry) and the token is the current counter, which is
--                 this acquisition's; if the counter was lost (eviction,
--                 failover) it is incremented again rather than guessed
--   0, pttl, cur, 0  held by another owner value cur (a string); pttl = its
--                 remaining ms (-1 if none)
-- The counter never expires and is only ever incremented, so tokens of one
-- session strictly increase across acquisitions, expiries and script flushes.
local ttl = ARGV[1]
local now
local out = {}
for i = 1, #KEYS / 3 do
  local lease, fence, mark, me = KEYS[3 * i - 2], KEYS[3 * i - 1], KEYS[3 * i], ARGV[1 + i]
  local cur = redis.call('GET', lease)
  if cur == false then
    local token = redis.call('INCR', fence)
    redis.call('SET', lease, me, 'PX', ttl)
    local gap, due = -1, -1
    local released, nextpoll
    local m = redis.call('GET', mark)
    if m then
      redis.call('DEL', mark)
      local r, d = string.match(m, '^(%d+):?(%d*)$')
      released, nextpoll = tonumber(r), tonumber(d)
    end
    if released then
      if now == nil then
        local t = redis.call('TIME')
        now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
      end
      gap = math.max(0, now - released)
      if nextpoll then
        due = math.max(0, nextpoll - now)
      end
    end
    out[#out + 1] = token
    out[#out + 1] = 0
    out[#out + 1] = gap
    out[#out + 1] = due
  elseif cur == me then
    redis.call('PEXPIRE', lease, ttl)
    local token = tonumber(redis.call('GET', fence))
    if token == nil then
      token = redis.call('INCR', fence)
    end
    out[#out + 1] = token
    out[#out + 1] = 0
    out[#out + 1] = -1
    out[#out + 1] = -1
  else
    out[#out + 1] = 0
    out[#out + 1] = redis.call('PTTL', lease)
    out[#out + 1] = cur
    out[#out + 1] = 0
  end
end
return out
