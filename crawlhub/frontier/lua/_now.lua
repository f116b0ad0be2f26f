-- now: Redis's own clock, in seconds (workers' clocks do not matter)
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local now_s = t[1] .. '.' .. string.rep('0', 6 - #t[2]) .. t[2]
-- A Lua number handed to redis.call becomes text through "%.17g", which costs several
-- microseconds for a time like this one (more than the command): scores and times go
-- as text made once (ts), to the microsecond.
local function ts(x)
  if x == now then return now_s end  -- (a domain with no pace: its state and schedule at now)
  if x < 0 then return '-' .. ts(-x) end
  local us = math.floor(x * 1000000 + 0.5)  -- exact in a double up to year 2255
  local f = us % 1000000
  return string.format('%d.%06d', (us - f) / 1000000, f)
end
-- the same, made once for every domain a script visits: after now (a ZCOUNT's exclusive bound), now's day
local after_now_s, today_s = '(' .. now_s, string.format('%d', math.floor(now / 86400))
-- A deadline (a lease's, its download slot's): rounded up to the second. An integral score is stored
-- in a small sorted set without formatting a double (Redis 7.0 formats each with "%.17g", several
-- microseconds per member); a lease lives at most a second longer.
local function deadline_s(x) return string.format('%d', math.ceil(x)) end
-- A schedule's score (when a domain may next be asked for a request): whole microseconds. A partition's schedule
-- (a hundred domains or so) is a listpack, which Redis scans member by member; an integral score is stored
-- as an integer and compared without parsing its text (a ZADD of two domains to 125: 4.8 us, 14.7 us with
-- scores of seconds to the microsecond). Exact in a double until 2112.
local now_us = t[1] .. string.rep('0', 6 - #t[2]) .. t[2]
local function us(x)
  if x == now then return now_us end
  return string.format('%d', math.floor(x * 1000000 + 0.5))
end
