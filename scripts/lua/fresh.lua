-- fresh.lua: declare a keyspace fresh (no lease was ever granted in it).
-- KEYS[1]=the loss marker of one hash slot (keyspace Epoch)
-- returns 1 if the marker was written, 0 if one existed (left alone)
-- A missing marker is written as "<run id>:0": this server, no quarantine,
-- so that the first acquisitions do not wait. See acquire.lua.
if redis.call('EXISTS', KEYS[1]) == 1 then
  return 0
end
local info = redis.pcall('INFO', 'server')
local runid = type(info) == 'string' and string.match(info, 'run_id:(%w+)') or 'unknown'
redis.call('SET', KEYS[1], runid .. ':0')
return 1
