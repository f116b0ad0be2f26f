--! include _now _helpers _policy
-- Everything a worker has to tell the frontier, and the requests it takes,
-- in one call: ARGV[1] is JSON
--   {ctx: {spider, prefix, schedule, counts, inflight, leases, seq, delayed,
--          budget_used, budget, limits, seen, known},
--    enq: [{spec (dupefilter), payload, priority, force, ends (lease id or ''), domain}, ...],
--    fin: [{domain, lease ('' = none), outcome, retry_after}, ...],
--   (crawlhub.frontier.records: EnqueueOp, Finish)
--    ack: [lease id, ...],
--    n, ttl, worker, default_budget, conf (politeness), scan, factor_max, recovery,
--    workers (live workers of the spider), held ({domain: slots this worker holds})}
-- With several workers, one worker takes at most ceil(concurrency / workers) of a
-- domain's slots, so that the slots are shared by the workers, not held by one.
-- In this order: enqueue (so a page's links are queued before its lease
-- ends), finish, ack, then lease n requests.
-- Returns {'ok' | 'budget' | 'paused', wait ('' = nothing queued or delayed), added, acked, id, payload, ...}
-- (read by crawlhub.frontier.records.Tick.from_reply)
local a = cjson.decode(ARGV[1])
local ctx = a.ctx
ctx.factor_max, ctx.recovery = a.factor_max, a.recovery
local added = 0
for _, e in ipairs(a.enq or {}) do
  local new = first_seen(e.spec)
  if new then redis.call('INCR', ctx.seen) end
  if e.ends ~= '' then
    redis.call('ZREM', ctx.inflight, e.ends)
    redis.call('HDEL', ctx.leases, e.ends)
    release(ctx.spider, e.ends, ctx.schedule)
  end
  if new or e.force then
    -- a request that replaces a lease (a redirect, the browser fallback, another
    -- proxy) is the same page: first out of its queue, like a lease given back
    push(ctx, e.domain, e.priority, e.payload, e.ends ~= '')
    added = added + 1
  end
end
for _, f in ipairs(a.fin or {}) do finish(ctx, f.domain, f.lease, f.outcome, f.retry_after) end
local acked = 0
for _, id in ipairs(a.ack or {}) do
  acked = acked + redis.call('ZREM', ctx.inflight, id)
  redis.call('HDEL', ctx.leases, id)
  release(ctx.spider, id, ctx.schedule)
end
local out = {'ok', '', added, acked}
local n = tonumber(a.n) or 0
if n > 0 and redis.call('EXISTS', ctx.paused) == 1 then
  out[1] = 'paused'  -- `crawlhub pause`: nothing is leased until `crawlhub resume`
  return out
end
if n > 0 then
  local due = redis.call('ZRANGEBYSCORE', ctx.delayed, '-inf', now, 'LIMIT', 0, 100)
  for _, m in ipairs(due) do
    local d, p = split_delayed(m)
    push(ctx, d, priority_of(p), p, false)
    redis.call('ZREM', ctx.delayed, m)
  end
  local limit = tonumber(redis.call('GET', ctx.budget) or a.default_budget) or 0
  if limit > 0 then
    local used = tonumber(redis.call('GET', ctx.budget_used) or '0')
    if used >= limit then out[1] = 'budget'; return out end
    n = math.min(n, limit - used)
  end
  local conf, ttl = a.conf, tonumber(a.ttl)
  -- ready domains, best head-of-queue priority first, then longest ready
  local heads = {}
  for i, d in ipairs(redis.call('ZRANGEBYSCORE', ctx.schedule, '-inf', now, 'LIMIT', 0, tonumber(a.scan))) do
    local h = redis.call('ZRANGE', ctx.prefix .. ':' .. d, 0, 0, 'WITHSCORES')
    if #h == 0 then redis.call('ZREM', ctx.schedule, d) else table.insert(heads, {d, tonumber(h[2]), i}) end
  end
  table.sort(heads, function(x, y) if x[2] ~= y[2] then return x[2] < y[2] end return x[3] < y[3] end)
  local granted = 0
  for _, h in ipairs(heads) do
    if granted >= n then break end
    local d = h[1]
    local p = policy(d, conf, ctx.limits)
    if p.ready > now then
      redis.call('ZADD', ctx.schedule, p.ready, d)
    else
      local ak = p.sk .. ':active'
      local k, room = n - granted, nil
      local share = nil  -- this worker's fair share of the domain's slots, less what it holds
      if p.conc > 0 then
        redis.call('ZREMRANGEBYSCORE', ak, '-inf', now)
        room = p.conc - redis.call('ZCARD', ak)
        k = math.min(k, room)
        local workers = tonumber(a.workers) or 1
        if workers > 1 then
          share = math.ceil(p.conc / workers) - (tonumber((a.held or {})[d]) or 0)
        end
      end
      -- at its concurrency cap, a domain waits: a finishing download moves it forward
      local recheck = now + (tonumber(conf['recheck']) or 1)
      local full_share = share ~= nil and share <= 0
      if share ~= nil and share > 0 then k = math.min(k, share) end
      if full_share and k > 0 then
        -- this worker holds its share: the free slots stay for the others, the schedule as it is
      elseif k <= 0 then
        redis.call('ZADD', ctx.schedule, recheck, d)
      else
        local c, t = 0, p.tat
        while c < k and (p.interval == 0 or t - p.tau <= now) do
          c = c + 1
          t = math.max(t, now) + p.interval
        end
        local items = pop(ctx, d, c)
        take(p, #items)
        for _, item in ipairs(items) do
          local id = redis.call('INCR', ctx.seq) .. '@' .. d
          redis.call('ZADD', ctx.inflight, now + ttl, id)
          redis.call('HSET', ctx.leases, id, a.worker .. '\t' .. string.format('%.3f', now) .. '\t' .. item)
          redis.call('ZADD', ak, now + ttl, ctx.spider .. '/' .. id)
          table.insert(out, id)
          table.insert(out, item)
          granted = granted + 1
        end
        redis.call('ZADD', ctx.known, now, d)
        if redis.call('EXISTS', ctx.prefix .. ':' .. d) == 0 then
          redis.call('ZREM', ctx.schedule, d)
        elseif room ~= nil and room <= #items then
          redis.call('ZADD', ctx.schedule, math.max(p.tat - p.tau, recheck), d)
        else
          redis.call('ZADD', ctx.schedule, math.max(p.tat - p.tau, now), d)
        end
      end
    end
  end
  if limit > 0 and granted > 0 then redis.call('INCRBY', ctx.budget_used, granted) end
  local wake = nil
  local first = redis.call('ZRANGE', ctx.schedule, 0, 0, 'WITHSCORES')
  if #first > 0 then wake = tonumber(first[2]) end
  local retry = redis.call('ZRANGE', ctx.delayed, 0, 0, 'WITHSCORES')
  if #retry > 0 and (wake == nil or tonumber(retry[2]) < wake) then wake = tonumber(retry[2]) end
  if wake ~= nil then out[2] = string.format('%.3f', math.max(0, wake - now)) end
end
return out
