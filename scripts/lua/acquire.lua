-- acquire.lua: take the leases of several sessions at once.
-- KEYS[2i-1]=lease key of session i, KEYS[2i]=its fencing record (a hash:
-- field token, the session's last token recorded; field handoff, the mark
-- release.lua leaves), both in one slot; KEYS[2n+1]=the loss marker of
-- that slot (keyspace Epoch; optional: without it no loss is looked for);
-- KEYS[2n+2]=the slot's high-water mark (keyspace EpochTokens; optional:
-- without it every acquisition writes its token into the record);
-- KEYS[2n+3]=the marker's confirmation time (optional: without it a slot
-- migration is not told from a loss)
-- ARGV[1]=ttl in ms; ARGV[2]=loss quarantine in ms (0 = off); ARGV[3]=the
-- masters: '' (a marker of another server is always a loss), '-' (ask the
-- caller for them when a marker may have moved) or the run ids of the
-- masters, separated by spaces (' ' for none); then the owner values in
-- runs: ARGV[4]=an owner value, ARGV[5]=how many sessions, from the first,
-- it is for; ARGV[6], ARGV[7] the same for the next sessions, and so on;
-- n, the number of sessions, is the sum of the counts. An owner value is
-- unique per acquisition of a session (a caller gives one value to all
-- the sessions it acquires at once, and keeps a value for a session whose
-- reply it lost): one value for a call's sessions costs Redis about 2 us
-- less per session than one argument each (BenchmarkScriptAcquireNewKeys1000)
-- returns a flat array, four values per session:
--   token, 0, gap, due  acquired now. gap is the ms since the previous holder
--                 released the lease (from its handoff mark), or -1 when
--                 there is no mark for the last token (first acquisition,
--                 previous lease expired, or the release is older than the
--                 mark's lifetime); due is the ms until the session's next
--                 poll was due on the previous holder's schedule (0 if
--                 overdue), or -1 when the mark does not say
--   token, 0, -1, -1  already held by this owner value (a retried request):
--                 the TTL is set again (the caller counts its deadline from
--                 the retry) and the token is the record's, which is this
--                 acquisition's; if the record does not hold it (lost, or
--                 never written: a session before its first release), it is
--                 minted again rather than guessed, and written into the
--                 record, so that a further retry gets the same one
--   0, pttl, cur, 0  held by another owner value cur (a string); pttl = its
--                 remaining ms (-1 if none)
--   0, left, '<quarantine>', 0  free, but the slot is quarantined after a
--                 data loss for `left` more ms
--   0, 0, '<bad:ROLE>', problem  a key of the session cannot be used:
--                 ROLE is lease, fence (the fencing record) or oldfence (a
--                 fencing counter of the layout before the record, read
--                 while the record has no token); problem says why ("wrong
--                 type string", or for a token "not a decimal integer: ..."
--                 or "at or above 2^53-1: ..."). Nothing of the session was
--                 written; the key is left as it is (an operator may need
--                 it). Other sessions of the batch are acquired as usual.
-- or, instead of all that, {'<masters?>'} when ARGV[3] is '-' and the
-- marker may have moved: nothing was written; the caller calls again with
-- the run ids of the masters (see Moves below).
-- after the 4n values, when the loss marker or the high-water mark had the
-- wrong type or an unusable value, two more per key: '<bad:marker>' or
-- '<bad:high>', and why. Both are pollworker's own keys: the marker is
-- overwritten with a fresh quarantine, as a lost marker is (a repair that
-- only delays acquisitions, never lets two holders overlap); the
-- high-water mark is read as missing and overwritten (tokens then rest on
-- the clock and the records, as after its loss).
--
-- Cost: a free lease costs one command (SET NX PX of the lease) when no
-- session of the call has a record (one EXISTS over all the records tells,
-- as at a cold start); otherwise a session without a record costs two
-- (HMGET of the record, finding none, and the SET), one with a record a
-- third (HSET of the token); TIME, INFO, the marker and the high-water
-- mark are read once per call and the mark written once. A lease held by
-- another costs two more (GET, PTTL).
--
-- Tokens: a new token is max(last + 1, high + 1, Redis TIME in
-- microseconds), last being the session's record's token (0 without one)
-- and high the slot's high-water mark, the greatest token minted in the
-- slot, which is set to it. The record's token is set too where the
-- session has a record (its first release creates it, release.lua), or
-- where no high-water mark is passed. So a session's tokens increase
-- through the record or the mark, whichever holds the last; if both are
-- lost (a restart without persistence, FLUSHALL, a failover to a replica
-- that missed them, eviction) the clock still puts the next token above
-- every earlier one, as long as the server clock has moved forward since
-- the earlier token was minted. The mark runs ahead of the clock by at
-- most one microsecond per token minted in a call, and a call spends more
-- than that on each (a SET of a new key), so every token is at or below
-- the server clock when its call returns. Tokens are unique in a slot.
-- Tokens from a plain counter (older versions) are far below the clock,
-- so an upgrade keeps them increasing too. A version that writes every
-- token into the record reads the records only: while it runs beside this
-- one, a session without a record relies on the clock as after a loss.
-- Lua numbers are doubles, exact up to 2^53: a token above 2^53-1 could be
-- minted twice (or below the last), so a token that is not a decimal
-- integer below 2^53-1 is refused (reported as bad, never overwritten),
-- and none at or above it is minted. The clock reaches 2^53 us in the
-- year 2255. A token more than a year ahead of the server clock is not one
-- this script minted (none is minted above the clock and a record's or
-- the mark's token + 1; a clock stepped back, or a failover to a server
-- whose clock is behind, puts them minutes ahead, not a year): a foreign
-- write. It is refused as well, rather than used: one such value in the
-- high-water mark would otherwise run the slot's tokens up to 2^53-1 in a
-- few acquisitions (then none could be minted in the slot), and one in a
-- record would carry through the mark to every session acquired after it
-- in the same call (so that, the mark read as unusable later, their next
-- tokens would fall back below them to the clock).
--
-- The layout before the record (upgrade in place): a fencing counter
-- <prefix>:fence:{s} (a string) and a handoff mark <prefix>:released:{s}
-- (a string with a PX). While a record has no token, both are read (one
-- MGET; a key of another type reads as missing and is left alone): the
-- counter counts as the last token, the mark as the handoff mark, and
-- once the token is written to the record both are deleted. So tokens keep
-- increasing and a release by the previous version keeps its schedule.
--
-- Handoff marks: release.lua writes "<token>:<release ms>:<until ms>" or
-- "<token>:<release ms>:<until ms>:<next poll due ms>" (Redis time) into
-- the record's handoff field, token being the released lease's. A mark
-- counts only while its token is the record's (the lease released was the
-- last one granted: a later acquisition makes it stale without a write)
-- and until has not passed.
--
-- Losses: the marker holds "<run id>:<quarantine end ms>", then ":2" when
-- no key of the layout before the records can be in the slot: the marker
-- was written where there was none (a new keyspace, or one that lost
-- everything), and no older acquire.lua has run there since (it reads a
-- marker ending in ":2" as another server's, and rewrites it without:
-- after a downgrade the old keys are looked at again). A marker that is
-- missing (the data was lost, or this keyspace was never used) or written
-- by another server (a restart or failover: the latest writes may be
-- lost) is written anew with a quarantine of ARGV[2] ms from now, during
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
-- KEYS[2n+3]: a time, on the old server's clock, when the slot was still
-- there, so this server has not restarted since the slot arrived. The
-- confirmation time is written with every marker, and refreshed (at most
-- once a minute) while the marker's own server runs the script.
local ttl = ARGV[1]
-- owner(i) is session i's owner value, for i = 1, 2, ... in turn
local n, run, left = 0, 2, 0
for j = 5, #ARGV, 2 do
  n = n + tonumber(ARGV[j])
end
if #KEYS < 2 * n then
  return redis.error_reply('acquire: ' .. n .. ' owner values for ' .. #KEYS .. ' keys')
end
local function owner()
  while left == 0 do
    run = run + 2
    left = tonumber(ARGV[run + 1])
  end
  left = left - 1
  return ARGV[run]
end
local safe = 9007199254740991 -- 2^53 - 1: every token minted is below it
local year = 31536000000000   -- a year in us: how far ahead of the clock a token may be
local now, nowus
local function clock()
  if now == nil then
    local t = redis.call('TIME')
    nowus = tonumber(t[1]) * 1000000 + tonumber(t[2])
    now = math.floor(nowus / 1000)
  end
end
-- wrongtype names the type of a key whose read failed. pcall: an ACL
-- without +type still gets the report, without the type.
local function wrongtype(key)
  local t = redis.pcall('TYPE', key)
  return 'wrong type ' .. (type(t) == 'table' and t['ok'] or 'unknown')
end
-- get reads a key that should be a string: its value (false when
-- missing), or nil and 'wrong type <type>' when it is of another type.
local function get(key)
  local v = redis.pcall('GET', key)
  if type(v) == 'table' then
    return nil, wrongtype(key)
  end
  return v
end
-- parse reads a token (false when missing: 0), or nil and why it cannot
-- be used.
local function parse(v)
  if not v then
    return 0
  elseif not string.match(v, '^%d+$') then
    return nil, 'not a decimal integer: ' .. string.sub(v, 1, 40)
  elseif #v > 16 or tonumber(v) >= safe then
    return nil, 'at or above 2^53-1: ' .. string.sub(v, 1, 40)
  end
  clock()
  if tonumber(v) > nowus + year then
    return nil, 'more than a year ahead of the server clock (not a token pollworker minted): ' .. v
  end
  return tonumber(v)
end
local out, k = {}, 0
local function put(a, b, c, d)
  out[k + 1], out[k + 2], out[k + 3], out[k + 4] = a, b, c, d
  k = k + 4
end

local quarantine = 0
local badmarker
-- recordsonly: no key of the layout before the fencing records can exist
-- in this slot (the marker says so), so a record without a token needs
-- no look at them
local recordsonly = false
local marker, high, confirmed = KEYS[2 * n + 1], KEYS[2 * n + 2], KEYS[2 * n + 3]
local asked = ARGV[3] == '-'
local masters = {}
if not asked then
  for id in string.gmatch(ARGV[3], '%S+') do
    masters[id] = true
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
  local r, u, flag
  if m == nil then
    badmarker = problem
  elseif m then
    r, u, flag = string.match(m, '^(%w+):(%d+)(:?%w*)$')
  else
    flag = ':2' -- written now: nothing of the slot is left, old keys neither
  end
  recordsonly = flag == ':2'
  flag = recordsonly and flag or ''
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
    redis.call('SET', marker, runid .. ':' .. u .. flag)
    at = nil
  elseif r ~= runid then
    u = now + (tonumber(ARGV[2]) or 0)
    redis.call('SET', marker, runid .. ':' .. string.format('%d', u) .. flag)
    at = nil
  end
  if confirmed and (at == nil or at < now - 60000) then
    redis.call('SET', confirmed, string.format('%d', now))
  end
  quarantine = tonumber(u) - now
end

-- top is the slot's high-water mark (0 when missing or unusable)
local top, top0, badhigh = 0, 0, nil
if high then
  local v, problem = get(high)
  if v == nil then
    badhigh = problem
  elseif v then
    top, problem = parse(v)
    if top == nil then
      top, badhigh = 0, problem
    end
  end
  top0 = top
end

-- handoff reads a mark: the release time and the next poll's due time
-- (nil when it does not say), or nil when the mark does not count.
local function handoff(mark, token)
  if not mark or string.find(mark, token, 1, true) ~= 1 then
    return nil -- none, or a stale one (cheaply told)
  end
  local t, r, u, d = string.match(mark, '^(%d+):(%d+):(%d+):?(%d*)$')
  clock()
  if t ~= token or tonumber(u) <= now then
    return nil
  end
  return tonumber(r), tonumber(d)
end

-- legacyKeys returns the keys of the layout before the record that stand
-- for a record key: its fencing counter and its handoff mark.
local function legacyKeys(record)
  local p, tag = string.match(record, '^(.*):fencing:({.*})$')
  return {p .. ':fence:' .. tag, p .. ':released:' .. tag}
end

-- none: no session of the call has a fencing record, nor (where the slot
-- may hold them) a key of the layout before it, so each reads as a
-- record without a token, and none needs a read of its own: EXISTS over
-- them all instead of a read per session, the case of every session at a
-- cold start. The chunks grow from one session's keys eightfold up to 900
-- keys (unpack's limit is near 8000), so that a call whose sessions have
-- records (a handoff) learns it from its first. A key of any type counts,
-- so a record of the wrong type takes the path below.
local none = n > 0 and high ~= nil
local chunk, limit = {}, 1
for i = 1, n do
  chunk[#chunk + 1] = KEYS[2 * i]
  if not recordsonly then
    local old = legacyKeys(KEYS[2 * i])
    chunk[#chunk + 1], chunk[#chunk + 2] = old[1], old[2]
  end
  if #chunk >= limit or i == n then
    if redis.call('EXISTS', unpack(chunk)) > 0 then
      none = false
      break
    end
    chunk, limit = {}, math.min(limit * 8, 900)
  end
end

-- norecord stands for the reply of an HMGET that found no record: one
-- table for all (never written), as a table per session costs Redis about
-- 0.5 us per session (BenchmarkScriptAcquireNewKeys1000)
local norecord = {false, false}
for i = 1, n do
  local lease, record = KEYS[2 * i - 1], KEYS[2 * i]
  local me = owner()
  -- every key is checked before anything is written
  local rec = norecord
  if not none then
    rec = redis.pcall('HMGET', record, 'token', 'handoff')
  end
  local last, problem, role = nil, nil, 'fence'
  local released, nextpoll, legacy
  if rec['err'] then
    problem = wrongtype(record)
  elseif rec[1] then
    last, problem = parse(rec[1])
    if last then
      released, nextpoll = handoff(rec[2], rec[1])
    end
  elseif recordsonly or none then
    last = 0
  else
    -- the layout before the record: its counter and mark, if any
    legacy = legacyKeys(record)
    local old = redis.call('MGET', legacy[1], legacy[2])
    last, problem = parse(old[1])
    role = 'oldfence'
    if old[2] then
      local r, d = string.match(old[2], '^(%d+):?(%d*)$')
      released, nextpoll = tonumber(r), tonumber(d)
    end
    if not old[1] and not old[2] then
      legacy = nil
    end
  end
  local cur, token
  if last ~= nil then
    clock()
    token = math.max(last + 1, top + 1, nowus)
    if token >= safe then
      last, problem = nil, 'the next token would pass 2^53-1'
    end
  end
  if last == nil then
    put(0, 0, '<bad:' .. role .. '>', problem)
  elseif quarantine > 0 then
    cur, problem = get(lease)
  elseif redis.call('SET', lease, me, 'NX', 'PX', ttl) then
    -- taken now. call, not pcall: NX never meets a wrong type (a key of
    -- any type is there), and any other error ends the script
    cur = false
  else
    cur, problem = get(lease)
    if cur == false then
      -- NX found a key that GET does not: one expiring between the two
      -- reads (a server whose expiry is not frozen during a script, such
      -- as an emulator). It is free: take it, as NX would have
      redis.call('SET', lease, me, 'PX', ttl)
    end
  end
  if last == nil then
    -- reported above
  elseif cur == nil then
    put(0, 0, '<bad:lease>', problem)
  elseif cur == false and quarantine > 0 then
    put(0, quarantine, '<quarantine>', 0)
  elseif cur == false or (cur == me and not rec[1]) then
    -- a new term; or a retried request whose token the record does not
    -- hold (lost, or never written: minted again rather than guessed, and
    -- recorded, so a further retry gets the same one)
    top = token
    if rec[1] or legacy or cur == me or not high then
      redis.call('HSET', record, 'token', string.format('%d', token))
    end
    if legacy then
      redis.call('DEL', legacy[1], legacy[2])
    end
    if cur == false then
      local gap, due = -1, -1
      if released then
        gap = math.max(0, now - released)
        if nextpoll then
          due = math.max(0, nextpoll - now)
        end
      end
      put(token, 0, gap, due)
    else
      redis.call('PEXPIRE', lease, ttl)
      put(token, 0, -1, -1)
    end
  elseif cur == me then
    -- a retried request: the token is the record's, this acquisition's
    redis.call('PEXPIRE', lease, ttl)
    put(last, 0, -1, -1)
  else
    put(0, redis.call('PTTL', lease), cur, 0)
  end
end
if high and (top ~= top0 or badhigh) then
  redis.call('SET', high, string.format('%d', top))
end
if badmarker then
  out[#out + 1] = '<bad:marker>'
  out[#out + 1] = badmarker
end
if badhigh then
  out[#out + 1] = '<bad:high>'
  out[#out + 1] = badhigh
end
return out
