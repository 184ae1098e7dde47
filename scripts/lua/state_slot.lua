-- state_slot.lua: record a scheduled session's last slot started or
-- finished in its state hash, fenced by its lease.
-- KEYS[1]=lease key of the session, KEYS[2]=its state key (same slot)
-- ARGV[1]=owner value of the writer's lease; ARGV[2]=its fencing token
-- (decimal); ARGV[3]='started' or 'finished'; ARGV[4]=the slot time, Unix
-- ms (decimal); ARGV[5]=the outcome ('' for started)
-- returns {1, ''} when written; {0, 'lease'} when the lease key does not
-- hold ARGV[1] (nothing written); {0, 'token'} when the slot fields were
-- written under a greater token than ARGV[2] (nothing written); {0, 'type'}
-- when the state key is not a hash (left for an operator; nothing written).
-- Fields: slot_started, or slot_finished and slot_outcome, and slot_token.
-- The poller's fields (data, token, saved, polled; state_save.lua) are
-- left alone: a hash with slot fields only reads as never saved.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return {0, 'lease'}
end
local stored = redis.pcall('HGET', KEYS[2], 'slot_token')
if type(stored) == 'table' and stored['err'] ~= nil then
  return {0, 'type'}
end
local storedToken = stored and tonumber(stored)
if storedToken and storedToken > tonumber(ARGV[2]) then
  return {0, 'token'}
end
if ARGV[3] == 'started' then
  redis.call('HSET', KEYS[2], 'slot_started', ARGV[4], 'slot_token', ARGV[2])
else
  redis.call('HSET', KEYS[2], 'slot_finished', ARGV[4], 'slot_outcome', ARGV[5], 'slot_token', ARGV[2])
end
return {1, ''}
