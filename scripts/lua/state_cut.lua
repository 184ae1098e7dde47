-- state_cut.lua: mark, in a scheduled session's state hash, that the
-- slots it recorded do not carry over: the session was removed, paused or
-- resumed, or its schedule changed (package session writes it before it
-- records the change). A holder that finds slot_cut at or after
-- slot_finished treats the session as new: it runs no slot due before it
-- took it.
-- KEYS[1]=the session's state key
-- returns the cut (Redis TIME, Unix ms) when written; 0 when the key has
-- no slot_finished (nothing recorded: nothing written, no key created) or
-- is not a hash (left for an operator).
local finished = redis.pcall('HGET', KEYS[1], 'slot_finished')
if type(finished) ~= 'string' then
  return 0
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('HSET', KEYS[1], 'slot_cut', string.format('%d', now))
return now
