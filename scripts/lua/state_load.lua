-- state_load.lua: read the state of several sessions, read-only.
-- KEYS[i]=state key of session i (in Redis Cluster, all in one slot)
-- returns a flat array: the Redis TIME in ms, then five entries per
-- session: data, token, saved ms, polled ms (each false/nil when the
-- session has no saved state), and a problem: false, or 'wrong type T'
-- when the key is not a hash (the four fields are then false; T is '?'
-- when an ACL refuses TYPE). A key of the wrong type never fails the call:
-- the other sessions are read. The
-- server time lets a reader measure how long ago a poll started on its
-- own clock (the writer's clock may differ).
local t = redis.call('TIME')
local out = {tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)}
for i = 1, #KEYS do
  local v = redis.pcall('HMGET', KEYS[i], 'data', 'token', 'saved', 'polled')
  local problem = false
  if v['err'] then
    problem = 'wrong type ' .. (redis.pcall('TYPE', KEYS[i])['ok'] or '?')
    v = {false, false, false, false}
  end
  out[5 * i - 3] = v[1]
  out[5 * i - 2] = v[2]
  out[5 * i - 1] = v[3]
  out[5 * i] = v[4]
  out[5 * i + 1] = problem
end
return out
