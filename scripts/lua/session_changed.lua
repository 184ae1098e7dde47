-- session_changed.lua: record a change to sessions, atomically.
-- KEYS[1]=session revision counter, KEYS[2]=changes sorted set,
-- KEYS[3]=bucket sizes hash (all three in one slot)
-- ARGV[2i-1]=index bucket of changed sessions, ARGV[2i]=change of its size
-- (ids added minus ids removed)
-- returns the new revision. Each bucket's score becomes that revision, so a
-- reader that has seen revision r finds every bucket changed since with
-- ZRANGE changes (r +inf BYSCORE, and its size in the hash.
local rev = redis.call('INCR', KEYS[1])
for i = 1, #ARGV, 2 do
  redis.call('ZADD', KEYS[2], rev, ARGV[i])
  local d = tonumber(ARGV[i + 1])
  if d ~= 0 then
    redis.call('HINCRBY', KEYS[3], ARGV[i], d)
  end
end
return rev
