-- node_unclaim.lua: KEYS[1]=node info key; ARGV[1]=this registry's info, ARGV[2]=the info its last claim wrote (optional);
-- returns 1 deleted, 0 absent, -1 held by another value
-- Gives up the claim of claim.lua: deletes KEYS[1] only if it holds ARGV[1]
-- or ARGV[2] (both are this incarnation's).
local cur = redis.call('GET', KEYS[1])
if cur == false then
  return 0
end
if cur ~= ARGV[1] and cur ~= (ARGV[2] or ARGV[1]) then
  return -1
end
redis.call('DEL', KEYS[1])
return 1
