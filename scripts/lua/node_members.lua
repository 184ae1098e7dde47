-- node_members.lua: KEYS[1]=node index; no ARGV; returns {server time ms, id1, expiry1 ms, id2, expiry2 ms, ...}
-- Prunes members whose score (expiry, ms) is below the server time, then
-- lists the rest. A member whose expiry equals the server time is still live.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', '(' .. string.format('%.0f', now))
local live = redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')
local out = {now}
for i = 1, #live, 2 do
  out[#out + 1] = live[i]
  out[#out + 1] = tonumber(live[i + 1])
end
return out
