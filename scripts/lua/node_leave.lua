-- node_leave.lua: KEYS[1]=node index; ARGV[1]=id, ARGV[2]=the latest expiry (ms) this incarnation wrote; returns 1 if removed
-- Removes ARGV[1] from the index only if its expiry is not later than
-- ARGV[2]: a later one was written by another incarnation that claimed the id
-- since, and stays. (ZRANGEBYSCORE rather than ZSCORE: the documented
-- least-privilege ACL has the former; the index holds one entry per node.)
local older = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[2])
for _, id in ipairs(older) do
  if id == ARGV[1] then
    return redis.call('ZREM', KEYS[1], ARGV[1])
  end
end
return 0
