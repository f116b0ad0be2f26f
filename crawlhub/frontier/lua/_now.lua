-- now: Redis's own clock, in seconds (workers' clocks do not matter)
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
-- A Lua number handed to redis.call becomes text through "%.17g", which costs several
-- microseconds for a time like this one (more than the command): scores and times go
-- as text made once (ts), to the microsecond.
local function ts(x) return string.format('%.6f', x) end
local now_s = ts(now)
