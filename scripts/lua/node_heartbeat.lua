-- node_heartbeat.lua: KEYS[1]=node index; ARGV[1]=id, ARGV[2]=ttl ms; returns server time ms
-- Records that ARGV[1] is alive until server time + ttl (the member's score)
-- and prunes members whose score is below the server time. TIME is read
-- first; Redis >= 5 replicates script effects, so writes after it are allowed.
--
-- The prune comes before the ZADD on purpose. Over maxmemory (noeviction)
-- Redis refuses an allocating command such as ZADD in a script without
-- flags only as the script's first write (a script is never stopped
-- halfway); ZREMRANGEBYSCORE allocates nothing and is always allowed. So a
-- member's heartbeat, which only moves its own score (no growth), keeps
-- working while Redis is full, and peers do not see it leave. It can add
-- one entry only for a worker whose Info key node_claim.lua just renewed
-- (a member within the last TTL): a new worker's claim is a SET, refused
-- while Redis is full. A `#!lua flags=allow-oom` line would say the same
-- explicitly but is refused by Redis < 7 and by miniredis.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', '(' .. string.format('%.0f', now))
redis.call('ZADD', KEYS[1], string.format('%.0f', now + tonumber(ARGV[2])), ARGV[1])
return now
