-- node_holder.lua: KEYS[1]=node info key; no ARGV; returns {value or false, PTTL ms, server time ms}
-- Read-only: who claims a node id, and until when (server time + PTTL).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
return {redis.call('GET', KEYS[1]), redis.call('PTTL', KEYS[1]), now}
