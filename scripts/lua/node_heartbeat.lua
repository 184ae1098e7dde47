-- node_heartbeat.lua: KEYS[1]=node index; ARGV[1]=id, ARGV[2]=ttl ms; returns server time ms
-- Records that ARGV[1] is alive until server time + ttl (the member's score)
-- and prunes members whose score is below the server time. TIME is read
-- first; Redis >= 5 replicates script effects, so writes after it are allowed.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZADD', KEYS[1], string.format('%.0f', now + tonumber(ARGV[2])), ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', '(' .. string.format('%.0f', now))
return now
