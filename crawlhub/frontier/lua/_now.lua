-- now: Redis's own clock, in seconds (workers' clocks do not matter)
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
