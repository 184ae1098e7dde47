-- session_loads.lua: replace the loads hash with loads counted from the
-- definitions (the repair of an index written before loads were kept), if
-- no write was recorded since the count began.
-- KEYS[1]=session revision counter, KEYS[2]=changes sorted set,
-- KEYS[3]=loads hash (all three in one slot)
-- ARGV[1]=revision read before the definitions were counted,
-- ARGV[2i]=a placement unit, ARGV[2i+1]=its load (polls per day)
-- returns the new revision, or -1 (nothing written) when the revision moved.
local cur = tonumber(redis.call('GET', KEYS[1]) or '0')
if cur ~= tonumber(ARGV[1]) then
  return -1
end
local old = redis.call('HKEYS', KEYS[3])
local rev = redis.call('INCR', KEYS[1])
for _, f in ipairs(old) do
  if f ~= 'complete' then
    redis.call('ZADD', KEYS[2], rev, f)
  end
end
redis.call('DEL', KEYS[3])
for i = 2, #ARGV, 2 do
  redis.call('HSET', KEYS[3], ARGV[i], ARGV[i + 1])
  redis.call('ZADD', KEYS[2], rev, ARGV[i])
end
redis.call('HSET', KEYS[3], 'complete', '1')
return rev
