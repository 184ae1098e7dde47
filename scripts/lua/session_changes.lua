-- session_changes.lua: read what changed in the sessions since a revision.
-- KEYS[1]=session revision counter, KEYS[2]=changes sorted set,
-- KEYS[3]=bucket sizes hash (all three in one slot); ARGV[1]=revision seen
-- returns a flat array: the current revision, then for each bucket changed
-- after ARGV[1]: the bucket, the revision of its last change and its size
-- (false when unknown). Read-only.
local out = {tonumber(redis.call('GET', KEYS[1]) or '0')}
local z = redis.call('ZRANGE', KEYS[2], '(' .. ARGV[1], '+inf', 'BYSCORE', 'WITHSCORES')
for i = 1, #z, 2 do
  out[#out + 1] = z[i]
  out[#out + 1] = z[i + 1]
  out[#out + 1] = redis.call('HGET', KEYS[3], z[i])
end
return out
