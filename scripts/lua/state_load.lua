-- state_load.lua: read the state of several sessions, read-only.
-- KEYS[i]=state key of session i (in Redis Cluster, all in one slot)
-- returns a flat array: the Redis TIME in ms, then four entries per
-- session: data, token, saved ms, polled ms (each false/nil when the
-- session has no saved state). The server time lets a reader measure how
-- long ago a poll started on its own clock (the writer's clock may differ).
local t = redis.call('TIME')
local out = {tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)}
for i = 1, #KEYS do
  local v = redis.call('HMGET', KEYS[i], 'data', 'token', 'saved', 'polled')
  out[4 * i - 2] = v[1]
  out[4 * i - 1] = v[2]
  out[4 * i] = v[3]
  out[4 * i + 1] = v[4]
end
return out
