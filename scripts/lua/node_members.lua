-- node_members.lua: KEYS[1]=node index; no ARGV; returns {server time ms, id1, expiry1 ms, id2, expiry2 ms, ...}
-- Lists the members whose score (expiry, ms) is not below the server time:
-- a member whose expiry equals the server time is still live. It writes
-- nothing (the heartbeats prune the expired members: node_heartbeat.lua),
-- so that status, check and explain work on a replica and with a
-- read-only ACL user.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local live = redis.call('ZRANGEBYSCORE', KEYS[1], string.format('%.0f', now), '+inf', 'WITHSCORES')
local out = {now}
for i = 1, #live, 2 do
  out[#out + 1] = live[i]
  out[#out + 1] = tonumber(live[i + 1])
end
return out
