-- session_loads.lua: replace the loads hash and the sizes hash with counts
-- (loads and selector units' sizes from the definitions, buckets' sizes
-- from their index sets): the repair of an index written before loads were
-- kept, or whose sizes were left wrong, if no write was recorded since the
-- count began.
-- KEYS[1]=session revision counter, KEYS[2]=changes sorted set,
-- KEYS[3]=loads hash, KEYS[4]=sizes hash (all four in one slot)
-- ARGV[1]=revision read before the definitions were counted,
-- ARGV[3i-1]=a placement unit ("b" or "b|selector"), ARGV[3i]=its size
-- (a bucket's: the ids of its index set; a selector unit's: its active
-- sessions), ARGV[3i+1]=its load (polls per day)
-- returns the new revision, or -1 (nothing written) when the revision moved.
local cur = tonumber(redis.call('GET', KEYS[1]) or '0')
if cur ~= tonumber(ARGV[1]) then
  return -1
end
local rev = bump_revision(KEYS[1], KEYS[2]) -- session_rev.lua
for _, f in ipairs(redis.call('HKEYS', KEYS[3])) do
  if f ~= 'complete' then
    redis.call('ZADD', KEYS[2], rev, f)
  end
end
redis.call('DEL', KEYS[3])
for _, f in ipairs(redis.call('HKEYS', KEYS[4])) do
  redis.call('ZADD', KEYS[2], rev, f)
end
redis.call('DEL', KEYS[4])
for i = 2, #ARGV, 3 do
  redis.call('ZADD', KEYS[2], rev, ARGV[i])
  if tonumber(ARGV[i + 1]) ~= 0 then
    redis.call('HSET', KEYS[4], ARGV[i], ARGV[i + 1])
  end
  if tonumber(ARGV[i + 2]) ~= 0 then
    redis.call('HSET', KEYS[3], ARGV[i], ARGV[i + 2])
  end
end
redis.call('HSET', KEYS[3], 'complete', '1')
return tonumber(rev)
