-- node_claim.lua: KEYS[1]=node info key; ARGV[1]=this registry's info (JSON, unique to its incarnation), ARGV[2]=ttl ms,
-- ARGV[3]=the info this registry's last claim wrote (optional; differs from ARGV[1] after a weight change)
-- returns {1} when claimed, {0, current value, its PTTL ms} when another value holds KEYS[1]
-- Claims the node id for one incarnation: sets KEYS[1] to ARGV[1] for ARGV[2]
-- ms only if KEYS[1] is absent or already holds ARGV[1] or ARGV[3]. The
-- value is the registry's Info, which carries its random incarnation, so
-- two processes with the same id never hold the claim at once.
local cur = redis.call('GET', KEYS[1])
if cur and cur ~= ARGV[1] and cur ~= (ARGV[3] or ARGV[1]) then
  return {0, cur, redis.call('PTTL', KEYS[1])}
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return {1}
