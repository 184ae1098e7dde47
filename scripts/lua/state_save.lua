-- state_save.lua: write a session's state, fenced by its lease.
-- KEYS[1]=lease key of the session, KEYS[2]=its state key (same slot)
-- ARGV[1]=owner value of the writer's lease; ARGV[2]=its fencing token
-- (decimal); ARGV[3]=the data; ARGV[4]=ms from the start of the poll that
-- saves to now, or -1 when unknown
-- returns {1, saved, polled} when written: saved is Redis TIME in ms,
-- polled is saved - ARGV[4] (0 when unknown);
-- {0, 'lease', ''} when the lease key does not hold ARGV[1] (expired,
-- released, or another acquisition's): nothing written;
-- {0, 'token', stored} when the state was written under a greater token
-- than ARGV[2]: nothing written.
-- The state key is a hash (data, token, saved, polled) without a TTL.
-- Tokens are compared as Lua doubles, exact up to 2^53 (acquire.lua).
-- A corrupt state (a token that is not a number or is at or above 2^53-1,
-- above every fencing token, or a key of another type than hash) counts as
-- never saved: the save overwrites it, as the Store reads it (the lease
-- check still applies).
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return {0, 'lease', ''}
end
local stored = redis.pcall('HGET', KEYS[2], 'token')
local wrongType = type(stored) == 'table' and stored['err'] ~= nil
local storedToken = not wrongType and stored and tonumber(stored)
if storedToken and storedToken < 9007199254740991 and storedToken > tonumber(ARGV[2]) then
  return {0, 'token', stored}
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if wrongType then
  redis.call('DEL', KEYS[2])
end
local ago = tonumber(ARGV[4]) or -1
local polled = 0
if ago >= 0 then
  polled = now - ago
end
redis.call('HSET', KEYS[2], 'data', ARGV[3], 'token', ARGV[2],
  'saved', string.format('%d', now), 'polled', string.format('%d', polled))
return {1, now, polled}
