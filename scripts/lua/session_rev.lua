-- session_rev.lua: the prelude of the scripts that bump the session
-- revision (session_changed.lua, session_loads.lua; lua.go joins them).
-- bump_revision(rev, changes) increments the counter KEYS rev and returns
-- the new revision as a string of digits (the changes set's score). A
-- missing counter (a new index, or Redis lost its data) starts at the
-- server's clock in microseconds, above every revision counted before a
-- loss (one write takes more than a microsecond), and its start is
-- recorded in the changes set as the member '!start': a reader that saw a
-- revision below it reads every bucket afresh (its record of the sessions
-- is gone). Counted again from 0, the revision could come back to one a
-- worker had seen, and the writes since the loss would read as "nothing
-- new". Revisions stay below 2^53 (exact as scores) until the year 2255.
local function bump_revision(rev, changes)
  if redis.call('EXISTS', rev) == 0 then
    local t = redis.call('TIME')
    local start = string.format('%.0f', tonumber(t[1]) * 1000000 + tonumber(t[2]))
    redis.call('SET', rev, start)
    redis.call('ZADD', changes, start, '!start')
  end
  return string.format('%.0f', redis.call('INCR', rev))
end
