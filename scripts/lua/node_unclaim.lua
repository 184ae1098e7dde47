-- node_unclaim.lua: KEYS[1]=node info key; ARGV[1]=this registry's info; returns 1 deleted, 0 absent, -1 held by another value
-- Gives up the claim of claim.lua: deletes KEYS[1] only if it holds ARGV[1].
local cur = redis.call('GET', KEYS[1])
if cur == false then
  return 0
end
if cur ~= ARGV[1] then
  return -1
end
redis.call('DEL', KEYS[1])
return 1
