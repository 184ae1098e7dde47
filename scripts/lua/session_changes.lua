-- session_changes.lua: read what changed in the sessions since a revision.
-- KEYS[1]=session revision counter, KEYS[2]=changes sorted set,
-- KEYS[3]=bucket sizes hash, KEYS[4]=loads hash (all four in one slot);
-- ARGV[1]=revision seen
-- returns a flat array: the current revision, whether the loads are
-- complete (1 or 0), then for each unit changed after ARGV[1]: the unit,
-- the revision of its last change, its size and its load (each false when
-- unknown). Read-only.
local out = {tonumber(redis.call('GET', KEYS[1]) or '0'), 0}
if redis.call('HGET', KEYS[4], 'complete') == '1' then
  out[2] = 1
end
local z = redis.call('ZRANGE', KEYS[2], '(' .. ARGV[1], '+inf', 'BYSCORE', 'WITHSCORES')
for i = 1, #z, 2 do
  out[#out + 1] = z[i]
  out[#out + 1] = z[i + 1]
  out[#out + 1] = redis.call('HGET', KEYS[3], z[i])
  out[#out + 1] = redis.call('HGET', KEYS[4], z[i])
end
return out
