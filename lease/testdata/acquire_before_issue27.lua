-- acquire.lua: take the leases of several sessions at once.
-- KEYS[3i-2]=lease key of session i, KEYS[3i-1]=its fencing counter,
-- KEYS[3i]=its handoff mark (written by release.lua); all three in one slot;
-- KEYS[3n+1]=the loss marker of that slot (keyspace Epoch; optional: without
-- it no loss is looked for); KEYS[3n+2]=its confirmation time (optional:
-- without it a slot migration is not told from a loss)
-- ARGV[1]=ttl in ms; ARGV[1+i]=owner value for session i (unique per
-- acquisition); ARGV[n+2]=loss quarantine in ms (optional, default 0 = off);
-- ARGV[n+3]='-' asks the caller for the masters when a marker may have
-- moved, or ARGV[n+3..] are those masters' run ids ("" for none); absent:
-- a marker of another server is always a loss
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
--   0, 0, '<bad:ROLE>', problem  a key of the session cannot be used:
--                 ROLE is lease, fence or mark; problem says why ("wrong
--                 type hash", or for a fencing counter "not a decimal
--                 integer: ..." or "at or above 2^53-1: ..."). Nothing of
--                 the session was written; the key is left as it is (an
--                 operator may need it). Other sessions of the batch are
--                 acquired as usual.
-- or, instead of all that, {'<masters?>'} when ARGV[n+3] is '-' and the
-- marker may have moved: nothing was written; the caller calls again with
-- the run ids of the masters (see Moves below).
-- after the 4n values, when the loss marker had the wrong type, two more:
--   '<bad:marker>', its type. The marker is pollworker's own key: it is
--   overwritten with a fresh quarantine, as a lost marker is (a repair
--   that only delays acquisitions, never lets two holders overlap).
--
-- Tokens: a new token is max(counter + 1, Redis TIME in microseconds), and
-- the counter is set to it. The counter never expires; if it is lost (a
-- restart without persistence, FLUSHALL, a failover to a replica that
-- missed it, eviction) the clock still puts the next token above every
-- earlier one, as long as the server clock has moved forward since the
-- earlier token was minted. Tokens from a plain counter (older versions)
-- are far below the clock, so an upgrade keeps them increasing too.
-- Lua numbers are doubles, exact up to 2^53: a token above 2^53-1 could be
-- minted twice (or below the counter), so a counter that is not a decimal
-- integer below 2^53-1 is refused (reported as bad, never overwritten).
-- The clock reaches 2^53 us in the year 2255.
--
-- Losses: the marker holds "<run id>:<quarantine end ms>". A marker that is
-- missing (the data was lost, or this keyspace was never used) or written
-- by another server (a restart or failover: the latest writes may be
-- lost) is written anew with a quarantine of ARGV[n+2] ms from now, during
-- which no free lease of the slot is taken, so that every lease granted
-- before the loss has ended at its holder (whose renewal fails) first.
--
-- Moves: in Redis Cluster a slot migration (resharding) moves the marker to
-- another master, with its writer's run id: not a loss, as MIGRATE moves
-- every key whole. A marker of another run id counts as moved, and is
-- written anew with this server's run id and the same quarantine end, only
-- when all of these hold: (1) its writer is a master now, of the same run
-- (not restarted) and never promoted from replica (second_repl_offset -1),
-- as the caller found it just before this call: it lost nothing before
-- the slot left it; (2) this server was never promoted from replica
-- (a failover, which may lose the latest writes, always makes a loss);
-- (3) this server started (TIME - uptime, + 2 s for the uptime's whole
-- seconds and clock skew between servers) before the confirmation time
-- KEYS[3n+2]: a time, on the old server's clock, when the slot was still
-- there, so this server has not restarted since the slot arrived. The
-- confirmation time is written with every marker, and refreshed (at most
-- once a minute) while the marker's own server runs the script.
local n = math.floor(#KEYS / 3)
local ttl = ARGV[1]
local safe = 9007199254740991 -- 2^53 - 1, the largest token minted
local now, nowus
local function clock()
  if now == nil then
    local t = redis.call('TIME')
    nowus = tonumber(t[1]) * 1000000 + tonumber(t[2])
    now = math.floor(nowus / 1000)
  end
end
-- get reads a key that should be a string: its value (false when
-- missing), or nil and 'wrong type <type>' when it is of another type.
local function get(key)
  local v = redis.pcall('GET', key)
  if type(v) == 'table' then
    -- pcall: an ACL without +type still gets the report, without the type
    local t = redis.pcall('TYPE', key)
    return nil, 'wrong type ' .. (type(t) == 'table' and t['ok'] or 'unknown')
  end
  return v
end
-- counter reads a fencing counter: its value (0 when missing), or nil and
-- why it cannot be used.
local function counter(fence)
  local v, problem = get(fence)
  if v == nil then
    return nil, problem
  elseif v == false then
    return 0
  elseif not string.match(v, '^%d+$') then
    return nil, 'not a decimal integer: ' .. string.sub(v, 1, 40)
  elseif #v > 16 or tonumber(v) >= safe then
    return nil, 'at or above 2^53-1: ' .. string.sub(v, 1, 40)
  end
  return tonumber(v)
end
-- mint returns the next token of a counter whose value is last, and sets
-- the counter to it; nil when it would exceed 2^53-1.
local function mint(fence, last)
  clock()
  local token = math.max(last + 1, nowus)
  if token > safe then
    return nil
  end
  redis.call('SET', fence, string.format('%d', token))
  return token
end
local out = {}
local function put(a, b, c, d)
  out[#out + 1] = a
  out[#out + 1] = b
  out[#out + 1] = c
  out[#out + 1] = d
end

local quarantine = 0
local badmarker
local marker, confirmed = KEYS[3 * n + 1], KEYS[3 * n + 2]
local asked = ARGV[n + 3] == '-'
local masters = {}
if ARGV[n + 3] and not asked then
  for k = n + 3, #ARGV do
    masters[ARGV[k]] = true
  end
end
-- info returns field f of an INFO section, nil when INFO is refused.
local function info(section, f)
  local text = redis.pcall('INFO', section)
  return type(text) == 'string' and string.match(text, f .. ':([%w%-]+)') or nil
end
-- settled reports whether this server has held its data since the time at
-- (ms): never promoted from replica, and started before it.
local function settled(at)
  local up = tonumber(info('server', 'uptime_in_seconds') or '')
  return at ~= nil and up ~= nil and info('replication', 'second_repl_offset') == '-1' and
    now - up * 1000 + 2000 < at
end
if marker then
  -- INFO may be refused (an ACL without +info, an emulator): a restart
  -- or failover then goes unseen, a lost marker still counts
  local runid = info('server', 'run_id') or 'unknown'
  local m, problem = get(marker)
  local r, u
  if m == nil then
    badmarker = problem
  elseif m then
    r, u = string.match(m, '^(%w+):(%d+)$')
  end
  clock()
  local at
  if confirmed then
    at = tonumber(get(confirmed) or '')
  end
  if r ~= runid and r ~= nil and (asked or masters[r]) and settled(at) then
    if asked then
      return {'<masters?>'}
    end
    -- moved here by a slot migration: this server's now, same quarantine
    redis.call('SET', marker, runid .. ':' .. u)
    at = nil
  elseif r ~= runid then
    u = now + (tonumber(ARGV[n + 2] or '0') or 0)
    redis.call('SET', marker, runid .. ':' .. string.format('%d', u))
    at = nil
  end
  if confirmed and (at == nil or at < now - 60000) then
    redis.call('SET', confirmed, string.format('%d', now))
  end
  quarantine = tonumber(u) - now
end

for i = 1, n do
  local lease, fence, mark, me = KEYS[3 * i - 2], KEYS[3 * i - 1], KEYS[3 * i], ARGV[1 + i]
  local cur, problem = get(lease)
  local last, m
  if cur == nil then
    put(0, 0, '<bad:lease>', problem)
  elseif cur == false and quarantine > 0 then
    put(0, quarantine, '<quarantine>', 0)
  elseif cur == false or cur == me then
    -- every key is checked before anything is written
    last, problem = counter(fence)
    if last == nil then
      put(0, 0, '<bad:fence>', problem)
    elseif cur == false then
      m, problem = get(mark)
      if m == nil then
        put(0, 0, '<bad:mark>', problem)
      else
        local token = mint(fence, last)
        if token == nil then
          put(0, 0, '<bad:fence>', 'the next token would pass 2^53-1')
        else
          redis.call('SET', lease, me, 'PX', ttl)
          local gap, due = -1, -1
          local released, nextpoll
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
          put(token, 0, gap, due)
        end
      end
    else
      -- a retried request: the token is the counter, which is this
      -- acquisition's; if the counter was lost it is minted again
      local token = last
      if token == 0 then
        token = mint(fence, 0)
      end
      if token == nil then
        put(0, 0, '<bad:fence>', 'the next token would pass 2^53-1')
      else
        redis.call('PEXPIRE', lease, ttl)
        put(token, 0, -1, -1)
      end
    end
  else
    put(0, redis.call('PTTL', lease), cur, 0)
  end
end
if badmarker then
  out[#out + 1] = '<bad:marker>'
  out[#out + 1] = badmarker
end
return out
