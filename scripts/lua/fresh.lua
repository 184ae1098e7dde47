-- fresh.lua: declare a keyspace fresh (no lease was ever granted in it).
-- KEYS[1]=the loss marker of one hash slot (keyspace Epoch); KEYS[2]=its
-- confirmation time (optional; see acquire.lua)
-- returns 1 if the marker was written, 0 if one existed (left alone)
-- A missing marker is written as "<run id>:0:2": this server, no
-- quarantine, so that the first acquisitions do not wait, and no key of
-- the layout before the fencing records; its confirmation time as this
-- server's time in ms. See acquire.lua.
if redis.call('EXISTS', KEYS[1]) == 1 then
  return 0
end
local info = redis.pcall('INFO', 'server')
local runid = type(info) == 'string' and string.match(info, 'run_id:(%w+)') or 'unknown'
redis.call('SET', KEYS[1], runid .. ':0:2')
if KEYS[2] then
  local t = redis.call('TIME')
  redis.call('SET', KEYS[2], string.format('%d', tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)))
end
return 1
