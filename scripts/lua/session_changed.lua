-- session_changed.lua: record a change to sessions, atomically.
-- KEYS[1]=session revision counter, KEYS[2]=changes sorted set,
-- KEYS[3]=bucket sizes hash, KEYS[4]=loads hash, KEYS[5] (optional)=the
-- write's mark (all in one slot): when it exists the record was written
-- already (a retry after a lost reply) and its revision is returned,
-- nothing written again; else it is set to the new revision for 30 s
-- (the writer retries for 5 s; a short life keeps busy writers' marks few)
-- ARGV[3i-2]=a changed placement unit (an index bucket "b", or "b|selector"),
-- ARGV[3i-1]=change of its size (ids added minus ids removed, index buckets
-- only), ARGV[3i]=change of its load (polls per day)
-- returns the new revision. Each unit's score becomes that revision, so a
-- reader that has seen revision r finds every unit changed since with
-- ZRANGE changes (r +inf BYSCORE, and its size and load in the hashes.
-- The first write to an empty index (no revision, no sizes) marks the loads
-- complete: they then count every session written since. The revision is
-- bumped by bump_revision (session_rev.lua, joined before this script).
-- A key of the wrong type fails the script before it writes anything
-- (a WRONGTYPE error naming the key), never half a record.
local want = {'string', 'zset', 'hash', 'hash'}
for i = 1, 4 do
  local t = redis.call('TYPE', KEYS[i])['ok']
  if t ~= 'none' and t ~= want[i] then
    return redis.error_reply('WRONGTYPE ' .. KEYS[i] .. ' is a ' .. t .. ', not a ' .. want[i])
  end
end
-- ARGV = {'?'}: a writer checking, before its first write, that it may
-- run this script (a Redis ACL) and that the keys have their types.
if ARGV[1] == '?' then
  return 0
end
if KEYS[5] then
  local done = redis.call('GET', KEYS[5])
  if done then
    return tonumber(done)
  end
end
if redis.call('EXISTS', KEYS[1]) == 0 and redis.call('EXISTS', KEYS[3]) == 0 then
  redis.call('HSET', KEYS[4], 'complete', '1')
end
local rev = bump_revision(KEYS[1], KEYS[2])
for i = 1, #ARGV, 3 do
  redis.call('ZADD', KEYS[2], rev, ARGV[i])
  local d = tonumber(ARGV[i + 1])
  if d ~= 0 then
    redis.call('HINCRBY', KEYS[3], ARGV[i], d)
  end
  local l = tonumber(ARGV[i + 2])
  if l ~= 0 then
    redis.call('HINCRBY', KEYS[4], ARGV[i], l)
  end
end
if KEYS[5] then
  redis.call('SET', KEYS[5], rev, 'PX', 30000)
end
return tonumber(rev)
