-- release.lua: delete the leases this owner still holds, and only those,
-- and leave a handoff mark for each successor.
-- KEYS[2i-1]=lease key of session i, KEYS[2i]=its handoff mark (same slot)
-- ARGV[1]=lifetime of a handoff mark in ms; ARGV[1+i]=owner value of lease i;
-- ARGV[1+n+i]=ms from now until session i's next poll is due on the old
-- holder's schedule, or -1 when unknown (n = #KEYS/2; optional: an older
-- caller passes none)
-- returns an array of integers: 1 deleted, 0 not ours (missing or another owner)
-- A deleted lease's mark is set to "<release time>" or "<release time>:<next
-- poll due>" (Redis TIME, in ms) with PX ARGV[1] (plus the wait for the next
-- poll); acquire.lua reads and deletes it to report the handoff gap and to
-- keep the session's poll schedule.
-- A key of the wrong type is never touched (an operator may need it): a
-- lease key that is not a string is not ours (0); a handoff mark that is
-- not a string is left as it is (the lease is still deleted, and the
-- successor's acquisition reports the mark).
local life = tonumber(ARGV[1])
local n = #KEYS / 2
local now
local out = {}
for i = 1, n do
  local lease, mark = KEYS[2 * i - 1], KEYS[2 * i]
  -- pcall: a wrong-typed key is an error reply (a table), never our value
  if redis.pcall('GET', lease) == ARGV[1 + i] then
    redis.call('DEL', lease)
    if now == nil then
      local t = redis.call('TIME')
      now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    end
    local due = tonumber(ARGV[1 + n + i] or '-1') or -1
    -- pcall: a wrong-typed mark is an error reply (a table); TYPE is not
    -- called here, so the release needs no more ACL than GET
    local cur = redis.pcall('GET', mark)
    if type(cur) == 'table' then
      -- left alone
    elseif due >= 0 then
      redis.call('SET', mark, string.format('%d:%d', now, now + due), 'PX', life + due)
    else
      redis.call('SET', mark, string.format('%d', now), 'PX', life)
    end
    out[i] = 1
  else
    out[i] = 0
  end
end
return out
