-- election_clear_successor.lua: drop the successor preference once it has been honoured.
-- KEYS[1]=successor key, holding "<candidate id>#<random>"
-- ARGV[1]=candidate id that just became leader
-- returns 1 if the preference named ARGV[1] and was deleted, 0 otherwise
local v = redis.call('GET', KEYS[1])
if v and string.sub(v, 1, #ARGV[1] + 1) == ARGV[1] .. '#' then
  return redis.call('DEL', KEYS[1])
end
return 0
