-- The politeness of one domain, computed from its state and limits: interval
-- between requests (rate, robots Crawl-delay and slow-down factor), burst
-- tolerance, the time the domain is next ready, and the concurrency cap.
-- Run-time limits (`crawlhub limits`): read from ctx.limits untagged; tagged, the
-- client sends them in conf.domains (the limits hash is cluster-wide, another slot).
-- conf's numbers, read once per call (conf_numbers) and not per domain: conf.n = {rate, concurrency, burst, base,
-- recheck}, defaults filled in.
local function conf_numbers(conf)
  if not conf.n then
    conf.n = {rate = tonumber(conf['rate']) or 0, concurrency = tonumber(conf['concurrency']) or 0,
              burst = tonumber(conf['burst']) or 1, base = tonumber(conf['base']) or 0.5,
              recheck = tonumber(conf['recheck']) or 1}
  end
  return conf.n
end
local function policy(d, conf, ctx)
  local sk = ctx.domain .. d
  local st = redis.call('HMGET', sk, 'tat', 'factor', 'until', 'delay', 'win', 'cnt', 'xd')
  local cn = conf_numbers(conf)
  local rate, conc = cn.rate, cn.concurrency
  local lim = nil
  -- (ctx.limit_of: the round's limits read at once for every domain it may visit, tick.lua)
  if ctx.limit_of then lim = ctx.limit_of[d] elseif ctx.limits then lim = redis.call('HGET', ctx.limits, d) end
  if lim then lim = cjson.decode(lim) elseif conf['domains'] then lim = conf['domains'][d] end
  if type(lim) == 'table' then
    if tonumber(lim['rate']) then rate = tonumber(lim['rate']) end
    if tonumber(lim['concurrency']) then conc = tonumber(lim['concurrency']) end
  end
  local interval = 0
  if rate > 0 then interval = 1 / rate end
  local delay = tonumber(st[4]) or 0
  if delay > interval then interval = delay end
  local factor = tonumber(st[2]) or 1
  if factor > 1 then interval = math.max(interval, cn.base) * factor end
  local tat = tonumber(st[1]) or 0
  local tau = interval * (cn.burst - 1)
  return {sk = sk, interval = interval, tau = tau, tat = tat, conc = conc, factor = factor,
          ready = math.max(tat - tau, tonumber(st[3]) or 0), win = tonumber(st[5]), cnt = tonumber(st[6]) or 0,
          xd = st[7]}
end
-- take n request slots of a domain at time now (GCRA); counts the rate window. One HSET (the
-- state was read with the policy). Once a day ('xd': the day it was last done), the key's 7-day expiry
-- is renewed and the expired slots of its active set are dropped (a reclaimed lease's slot is freed when
-- its request is queued again; these are a safety net): two commands a domain a day, not per window.
local function take(p, n)
  for i = 1, n do p.tat = math.max(p.tat, now) + p.interval end
  local win = math.floor(now / 10)
  if p.win == win then
    redis.call('HSET', p.sk, 'cnt', p.cnt + n, 'tat', ts(p.tat), 'last', now_s)
  else
    local prev = '0'  -- (text: a Lua number would be formatted with "%.17g")
    if p.win == win - 1 then prev = p.cnt end
    if p.xd == today_s then
      redis.call('HSET', p.sk, 'win', win, 'cnt', n, 'prev', prev, 'tat', ts(p.tat), 'last', now_s)
    else
      redis.call('HSET', p.sk, 'win', win, 'cnt', n, 'prev', prev, 'tat', ts(p.tat), 'last', now_s,
                 'xd', today_s)
      redis.call('EXPIRE', p.sk, '604800')
      -- expired slots; not for a domain with no state (xd unset: none taken for a week, or ever), which has
      -- none that count (ZCOUNT reads the live ones) and is swept the next day it is visited
      if p.conc > 0 and p.xd then redis.call('ZREMRANGEBYSCORE', p.sk .. ':active', '-inf', now_s) end
      p.xd = today_s
    end
    p.new_window = true
  end
  p.win, p.cnt = win, (p.win == win and p.cnt or 0) + n
end
-- a download is over: free its slot; 'slow' (429/503) slows the domain, 'ok' brings it back (an 'ok' of a lease
-- made while the domain was slowed: its id says so, "<seq>s@<queue>"; the tick marks it, from the state its
-- lease round read). Returns the domain's factor: finish.lua reports it; in the tick (ctx.factors) nobody reads it,
-- and a download with nothing to bring back reads nothing.
local function finish(ctx, d, lease_id, outcome, retry_after)
  d = host_of(d)  -- (a lane's queue: its domain's pace)
  local sk = ctx.domain .. d
  if lease_id ~= '' then release(ctx, lease_id) end
  -- the slow-down factor, read once per domain per call (ctx.factors: tick.lua) and kept as written
  local f = ctx.factors and ctx.factors[d]
  if f == nil then
    if ctx.factors and outcome ~= 'slow' and (outcome ~= 'ok' or (lease_id ~= '' and not string.find(lease_id, '^%d+s@'))) then
      return 1  -- nothing to say, or a success of a lease made while the domain was at its own pace
    end
    f = tonumber(redis.call('HGET', sk, 'factor') or '1')
  end
  if outcome == 'slow' then
    f = math.min(math.max(f, 1) * 2, tonumber(ctx.factor_max) or 32)
    local untl = now + (tonumber(retry_after) or 0)
    local old = tonumber(redis.call('HGET', sk, 'until') or '0')
    redis.call('HSET', sk, 'factor', string.format('%.4f', f), 'until', ts(math.max(untl, old)))
    redis.call('HINCRBY', sk, 'slowdowns', '1')
    redis.call('EXPIRE', sk, '604800')
    wake(ctx, d)  -- its next lease round reschedules it at its block (a capped domain's released slot would too)
  elseif outcome == 'ok' and f > 1 then
    f = f * (tonumber(ctx.recovery) or 0.8)
    if f < 1.05 then
      f = 1
      redis.call('HDEL', sk, 'factor')
    else
      redis.call('HSET', sk, 'factor', string.format('%.4f', f))
    end
  end
  if ctx.factors then ctx.factors[d] = f end
  return f
end
