-- node_claim.lua: KEYS[1]=node info key; ARGV[1]=this registry's info (JSON), ARGV[2]=ttl ms, ARGV[3]=its incarnation,
-- ARGV[4]='renew' (optional) to only move the expiry of the Info this incarnation holds
-- returns {1} when claimed, {0, current value, its PTTL ms} when another incarnation holds KEYS[1],
-- {2} in renew mode when KEYS[1] is absent (nothing written)
-- Claims the node id for one incarnation: sets KEYS[1] to ARGV[1] for ARGV[2]
-- ms only if KEYS[1] is absent or holds an Info of incarnation ARGV[3]
-- (random per process, so two processes with the same id never hold the
-- claim at once; comparing the incarnation, not the whole value, lets the
-- holder change its Info, its weight, whether or not the reply of its
-- last claim reached it). A value that is not such an Info is another's.
local cur = redis.call('GET', KEYS[1])
if cur and cur ~= ARGV[1] then
  local ok, info = pcall(cjson.decode, cur)
  if not (ok and type(info) == 'table' and info['incarnation'] == ARGV[3]) then
    return {0, cur, redis.call('PTTL', KEYS[1])}
  end
end
-- Renew mode, used when the SET below was refused because Redis is over
-- maxmemory (noeviction): PEXPIRE allocates nothing and Redis runs it even
-- then, so a member stays live (with the Info it last wrote) while a new
-- worker, whose Info key is absent, cannot join.
if ARGV[4] == 'renew' then
  if not cur then
    return {2}
  end
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1}
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return {1}
