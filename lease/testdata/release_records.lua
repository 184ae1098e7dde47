-- release.lua: delete the leases this owner still holds, and only those,
-- and leave a handoff mark for each successor.
-- KEYS[2i-1]=lease key of session i, KEYS[2i]=its fencing record (same slot)
-- ARGV[1]=lifetime of a handoff mark in ms; ARGV[1+i]=owner value of lease
-- i; ARGV[1+n+i]=ms from now until session i's next poll is due on the old
-- holder's schedule, or -1 when unknown; ARGV[1+2n+i]=the token of lease i
-- (n = #KEYS/2)
-- returns an array of integers: 1 deleted, 0 not ours (missing or another owner)
-- A deleted lease's mark is the record's field handoff, set to
-- "<token>:<release time>:<until>" or "<token>:<release time>:<until>:<next
-- poll due>" (Redis TIME, in ms; until = the release, or the next poll due,
-- plus ARGV[1]); acquire.lua reads it to report the handoff gap and to keep
-- the session's poll schedule, while token is still the record's.
-- A key of the wrong type is never touched (an operator may need it): a
-- lease key that is not a string is not ours (0); a record that is not a
-- hash is left as it is (the lease is still deleted, and the successor's
-- acquisition reports the record).
local life = tonumber(ARGV[1])
local n = #KEYS / 2
local now
local out = {}
for i = 1, n do
  local lease, record = KEYS[2 * i - 1], KEYS[2 * i]
  -- pcall: a wrong-typed key is an error reply (a table), never our value
  if redis.pcall('GET', lease) == ARGV[1 + i] then
    redis.call('DEL', lease)
    if now == nil then
      local t = redis.call('TIME')
      now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    end
    local due = tonumber(ARGV[1 + n + i]) or -1
    local mark
    if due >= 0 then
      mark = string.format('%s:%d:%d:%d', ARGV[1 + 2 * n + i], now, now + due + life, now + due)
    else
      mark = string.format('%s:%d:%d', ARGV[1 + 2 * n + i], now, now + life)
    end
    -- pcall: a record of the wrong type is left alone; HSET needs no more
    -- ACL than the acquisition's
    redis.pcall('HSET', record, 'handoff', mark)
    out[i] = 1
  else
    out[i] = 0
  end
end
return out
