-- acquire.lua: take the leases of several sessions at once.
-- KEYS[3i-2]=lease key of session i, KEYS[3i-1]=its fencing counter,
-- KEYS[3i]=its handoff mark (written by release.lua); all three in one slot;
-- KEYS[3n+1]=the loss marker of that slot (keyspace Epoch; optional: without
-- it no loss is looked for)
-- ARGV[1]=ttl in ms; ARGV[1+i]=owner value for session i (unique per
-- acquisition); ARGV[n+2]=loss quarantine in ms (optional, default 0 = off)
-- returns a flat array, four values per session:
--   token, 0, gap, due  acquired now. gap is the ms since the previous holder
--                 released the lease (from the handoff mark, which is
--                 consumed), or -1 when there is no mark (first acquisition,
--                 previous lease expired, or the release is older than the
--                 mark's lifetime); due is the ms until the session's next
--                 poll was due on the previous holder's schedule (0 if
--                 overdue), or -1 when the mark does not say
--   token, 0, -1, -1  already held by this owner value (a retried request):
--                 the TTL is set again (the caller counts its deadline from
--                 the retry) and the token is the current counter, which is
--                 this acquisition's; if the counter was lost it is minted
--                 again rather than guessed
--   0, pttl, cur, 0  held by another owner value cur (a string); pttl = its
--                 remaining ms (-1 if none)
--   0, left, '<quarantine>', 0  free, but the slot is quarantined after a
--                 data loss for `left` more ms
--
-- Tokens: a new token is max(counter + 1, Redis TIME in microseconds), and
-- the counter is set to it. The counter never expires; if it is lost (a
-- restart without persistence, FLUSHALL, a failover to a replica that
-- missed it, eviction) the clock still puts the next token above every
-- earlier one, as long as the server clock has moved forward since the
-- earlier token was minted. Tokens from a plain counter (older versions)
-- are far below the clock, so an upgrade keeps them increasing too.
--
-- Losses: the marker holds "<run id>:<quarantine end ms>". A marker that is
-- missing (the data was lost, or this keyspace was never used) or written
-- by another server (a restart or failover: the latest writes may be
-- lost) is written anew with a quarantine of ARGV[n+2] ms from now, during
-- which no free lease of the slot is taken, so that every lease granted
-- before the loss has ended at its holder (whose renewal fails) first.
local n = math.floor(#KEYS / 3)
local ttl = ARGV[1]
local now, nowus
local function clock()
  if now == nil then
    local t = redis.call('TIME')
    nowus = tonumber(t[1]) * 1000000 + tonumber(t[2])
    now = math.floor(nowus / 1000)
  end
end
local function mint(fence)
  clock()
  local last = tonumber(redis.call('GET', fence) or '0') or 0
  local token = math.max(last + 1, nowus)
  redis.call('SET', fence, string.format('%d', token))
  return token
end

local quarantine = 0
local marker = KEYS[3 * n + 1]
if marker then
  -- INFO may be refused (an ACL without +info, an emulator): a restart
  -- or failover then goes unseen, a lost marker still counts
  local info = redis.pcall('INFO', 'server')
  local runid = type(info) == 'string' and string.match(info, 'run_id:(%w+)') or 'unknown'
  local m = redis.call('GET', marker)
  local r, u
  if m then
    r, u = string.match(m, '^(%w+):(%d+)$')
  end
  clock()
  if r ~= runid then
    u = now + (tonumber(ARGV[n + 2] or '0') or 0)
    redis.call('SET', marker, runid .. ':' .. string.format('%d', u))
  end
  quarantine = tonumber(u) - now
end

local out = {}
for i = 1, n do
  local lease, fence, mark, me = KEYS[3 * i - 2], KEYS[3 * i - 1], KEYS[3 * i], ARGV[1 + i]
  local cur = redis.call('GET', lease)
  if cur == false and quarantine > 0 then
    out[#out + 1] = 0
    out[#out + 1] = quarantine
    out[#out + 1] = '<quarantine>'
    out[#out + 1] = 0
  elseif cur == false then
    local token = mint(fence)
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
      token = mint(fence)
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
