-- node_unclaim.lua: KEYS[1]=node info key; ARGV[1]=this registry's incarnation;
-- returns 1 deleted, 0 absent, -1 held by another incarnation
-- Gives up the claim of claim.lua: deletes KEYS[1] only if it holds an Info
-- of incarnation ARGV[1].
local cur = redis.call('GET', KEYS[1])
if cur == false then
  return 0
end
local ok, info = pcall(cjson.decode, cur)
if not (ok and type(info) == 'table' and info['incarnation'] == ARGV[1]) then
  return -1
end
redis.call('DEL', KEYS[1])
return 1
