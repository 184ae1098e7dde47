-- inspect.lua: read-only look at several leases and the keys beside them.
-- KEYS[2i-1]=lease key of session i, KEYS[2i]=its fencing record (same slot)
-- returns a flat array, five entries per session: owner value (false/nil
-- if none, or if the lease key is not a string); remaining ms of the lease
-- key (PTTL: -2 missing, -1 no expiry); false, or the first problem that
-- keeps acquire.lua from taking the lease: "ROLE:problem" where ROLE is
-- lease, fence or oldfence and problem is as acquire.lua reports it
-- ("wrong type string", a token "not a decimal integer: ...", "at or
-- above 2^53-1: ..." or "more than a year ahead of the server clock ...");
-- the token of the session's fencing record, the
-- last one minted where the session has a record (its first release
-- creates it; 0 if none); and when its
-- next poll is due by a handoff mark that still counts (Redis time in ms;
-- -1 without one, or if the mark does not say).
-- A record without a token is read as acquire.lua reads it in a slot whose
-- marker does not say "records only": through the fencing counter and the
-- handoff mark of the layout before the records (see acquire.lua).
local safe = 9007199254740991 -- 2^53 - 1, as acquire.lua
local year = 31536000000000   -- a year in us, as acquire.lua
local now, nowus
local function clock()
  if now == nil then
    local tm = redis.call('TIME')
    nowus = tonumber(tm[1]) * 1000000 + tonumber(tm[2])
    now = math.floor(nowus / 1000)
  end
end
-- get reads a key that should be a string, as acquire.lua does: its value
-- (false when missing), or nil and 'wrong type <type>'. TYPE only runs
-- for a bad key, and may be refused (an ACL without +type).
local function wrongtype(key)
  local t = redis.pcall('TYPE', key)
  return 'wrong type ' .. (type(t) == 'table' and t['ok'] or 'unknown')
end
local function get(key)
  local v = redis.pcall('GET', key)
  if type(v) == 'table' then
    return nil, wrongtype(key)
  end
  return v
end
local function token(v)
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
-- record returns the session's problem (false if none), token and due.
local function record(key)
  local rec = redis.pcall('HMGET', key, 'token', 'handoff')
  if rec['err'] then
    return 'fence:' .. wrongtype(key), 0, -1
  end
  if rec[1] then
    local t, bad = token(rec[1])
    if t == nil then
      return 'fence:' .. bad, 0, -1
    end
    local mt, _, u, d = string.match(rec[2] or '', '^(%d+):(%d+):(%d+):?(%d*)$')
    clock()
    if mt ~= rec[1] or tonumber(u) <= now then
      return false, t, -1
    end
    return false, t, tonumber(d) or -1
  end
  local p, tag = string.match(key, '^(.*):fencing:({.*})$')
  local old = redis.call('MGET', p .. ':fence:' .. tag, p .. ':released:' .. tag)
  local t, bad = token(old[1])
  if t == nil then
    return 'oldfence:' .. bad, 0, -1
  end
  local _, d = string.match(old[2] or '', '^(%d+):?(%d*)$')
  return false, t, tonumber(d) or -1
end
local out = {}
for i = 1, #KEYS / 2 do
  local lease = KEYS[2 * i - 1]
  local v, bad = get(lease)
  local problem, t, due = record(KEYS[2 * i])
  if v == nil and not problem then
    problem = 'lease:' .. bad
  end
  out[5 * i - 4] = v or false
  out[5 * i - 3] = redis.call('PTTL', lease)
  out[5 * i - 2] = problem
  out[5 * i - 1] = t
  out[5 * i] = due
end
return out
