--! include _now _ctx _helpers _policy
-- Everything a worker has to tell one partition of the frontier, and the
-- requests it takes, in one call. KEYS: the partition's key names (_ctx.lua; KEYS[1] its anchor);
-- ARGV[2..] the enqueues, 2 arguments each (crawlhub.frontier.records.EnqueueOp.to_argv:
-- the filter's spec (kind, key, extra), priority, force ('1' or ''), ends (lease id or ''),
-- token (a forced request's id, or ''), domain, tab-separated; then the payload); ARGV[1] is JSON
--   {ctx: {spider, factor_max, recovery, lanes} (the rest of ctx, the key names, from KEYS: _ctx.lua),
--    fin: [{domain, lease ('' = none), outcome, retry_after}, ...],
--   (crawlhub.frontier.records: EnqueueOp, Finish)
--    ack: [lease id, ...],
--    n, ttl, worker, default_budget, conf (politeness), scan,
--    workers (live workers of the spider), held ({domain: slots this worker holds}),
--    lanes (the queues' lanes this worker takes: '' = the domains' own queues, 'browser'... ; default {''}),
--    ahead (up to this many more than n, from domains with no pace and no cap; default 0)}
-- (ctx.lanes: every lane of the crawl, for the partition's hint and to wake a domain's lanes)
-- With several workers, one worker takes at most ceil(concurrency / workers) of a
-- domain's slots, so that the slots are shared by the workers, not held by one.
-- In this order: enqueue (so a page's links are queued before its lease
-- ends), finish, ack, then lease n requests.
-- Returns {'ok' | 'budget' | 'paused', wait ('' = nothing queued or delayed for this worker's lanes), added, acked,
--          epoch, wait for any lane ('' = none: the partition's hint), id, payload, ...}
-- (epoch: '' = not read; else 'e' .. the epoch key's value, 'e' alone when the key is gone)
-- (read by crawlhub.frontier.records.Tick.from_reply)
local a = cjson.decode(ARGV[1])
local ctx = ctx_of(a.ctx)
-- the enqueues' pushes and the finishes' slot releases are gathered and written per domain (flush_batch),
-- before the acks and the leases (nothing between pops or raises a schedule score)
ctx.batch, ctx.factors = new_batch(), {}
-- the leases whose slots this call frees (their downloads' ends): their acks need not free them again
ctx.freed = {}
-- the domains whose slots free up (acks, releases, slow-downs) are woken in one ZADD per lane (flush_wakes),
-- before anything returns or reads a schedule
ctx.wakes = {hosts = {}, seen = {}}
local added, fresh, sized = 0, 0, {}
-- the forced requests' ids (token): those of this worker's last call that had any are kept, so that the same call
-- sent again after its reply was lost (Redis stopped as it answered) queues none of them twice. The filter drops an
-- unforced link sent again, and the lease check a replacement; a forced one has neither. (<queue>:~forced:<worker>:
-- under the queue's prefix, so that a reset deletes it; no domain name has a '~'.)
local forced_key, forced_last, forced_now = nil, nil, {}  -- (read and named at the first forced request)
-- the enqueues: 2 arguments each after ARGV[1]: the link's fields, tab-separated, in the order of
-- crawlhub.frontier.records.ENQUEUE_ARGV (kind, key, extra, priority, force, ends, token, domain), then
-- its payload. No JSON and no table per link: most links are duplicates, and decoding them or
-- making a Lua table for each costs more than their SADD; one argument for the fields, as many
-- arguments cost Redis to read.
for i = 2, #ARGV, 2 do
  local kind, key, extra, priority, force, ends, token, domain =
    string.match(ARGV[i], '^(%a)\t([^\t]*)\t([^\t]*)\t([^\t]*)\t([^\t]*)\t([^\t]*)\t([^\t]*)\t(.*)$')
  -- a request that replaces a lease (a redirect, the browser fallback, another proxy) is the same page: first
  -- out of its queue, like a lease given back, and only while that lease is there to end. Gone, its page is
  -- queued already: by this very call, run before with its reply lost (Redis stopped as it answered, and the
  -- worker sent it again), or by the reclaim of the lease, expired; or a reset ended the crawl. A second copy
  -- would be a second fetch of the page, and a second dead letter. ('^' .. id: the lease is in another
  -- partition, which the worker tells once this call has queued the request.)
  local front, gone = false, false
  if ends ~= '' then
    front = true
    if string.byte(ends) ~= 94 then
      if redis.call('ZREM', ctx.inflight, ends) == 0 then
        gone = true
      else
        redis.call('HDEL', ctx.leases, ends)
        release(ctx, ends)
      end
    end
  end
  if token ~= '' then
    if forced_last == nil then
      forced_key, forced_last = ctx.prefix .. ':~forced:' .. tostring(a.worker or ''), {}
      for t in string.gmatch(redis.call('GET', forced_key) or '', '[^,]+') do forced_last[t] = true end
    end
    forced_now[#forced_now + 1] = token
    if forced_last[token] then gone = true end  -- queued by this call's first run
  end
  if not gone then
    local new = seen_first(kind, key, extra, sized)
    if new then fresh = fresh + 1 end
    if new or force == '1' then
      push(ctx, domain, priority, ARGV[i + 1], front)
      added = added + 1
    end
  end
end
if fresh > 0 then redis.call('INCRBY', ctx.seen, fresh) end
if #forced_now > 0 then redis.call('SET', forced_key, table.concat(forced_now, ','), 'EX', '86400') end
for _, f in ipairs(a.fin or {}) do finish(ctx, f.domain, f.lease, f.outcome, f.retry_after) end
flush_batch(ctx)
-- acks, a few commands per domain instead of four per lease
local ids = a.ack or {}
local acked = call_all('ZREM', ctx.inflight, {}, ids)
call_all('HDEL', ctx.leases, {}, ids)
local by_domain = {}
for _, id in ipairs(ids) do
  local d = not ctx.freed[id] and domain_of(id)
  if d then
    d = host_of(d)  -- (a lane's lease holds a slot of its domain)
    by_domain[d] = by_domain[d] or {}
    table.insert(by_domain[d], ctx.spider .. '/' .. id)
  end
end
for d, members in pairs(by_domain) do
  if call_all('ZREM', ctx.domain .. d .. ':active', {}, members) > 0 then wake(ctx, d) end
end
flush_wakes(ctx)
local out = {'ok', '', added, acked, '', ''}
local n = tonumber(a.n) or 0
-- untagged, a lease round reads the frontier's epoch (a reset moves it; gone: the frontier vanished)
if n > 0 and ctx.epoch then out[5] = 'e' .. (redis.call('GET', ctx.epoch) or '') end
-- tagged, pause and budget are global keys the client checks before it calls (a.n is within the budget)
if n > 0 and ctx.paused and redis.call('EXISTS', ctx.paused) == 1 then
  out[1] = 'paused'  -- `crawlhub pause`: nothing is leased until `crawlhub resume`
  return out
end
if n > 0 then
  local due = redis.call('ZRANGEBYSCORE', ctx.delayed, '-inf', now_s, 'LIMIT', '0', '100')
  for _, m in ipairs(due) do
    local d, p = split_delayed(m)
    push(ctx, d, priority_of(p), p, false)
    redis.call('ZREM', ctx.delayed, m)
  end
  local limit = 0
  -- ahead: requests leased beyond n, only from domains with no pace and no cap (nothing to be polite about:
  -- a request sent a little later than leased changes nothing), never under a budget (FRONTIER_LEASE_AHEAD)
  local ahead = tonumber(a.ahead) or 0
  if ctx.budget then limit = tonumber(redis.call('GET', ctx.budget) or a.default_budget) or 0 end
  if limit > 0 then
    local used = tonumber(redis.call('GET', ctx.budget_used) or '0')
    if used >= limit then out[1] = 'budget'; return out end
    n = math.min(n, limit - used)
    ahead = 0
  end
  local conf = a.conf
  -- the round's schedule changes, written per schedule after the loop (nothing in it reads a schedule):
  -- moved[sched] = {score, domain, ...}, gone[sched] = {domain, ...}
  local moved, gone = {}, {}
  local function move(sched, score, d)
    local t = moved[sched]
    if not t then t = {}; moved[sched] = t end
    t[#t + 1] = score
    t[#t + 1] = d
  end
  local function drop(sched, d)
    local t = gone[sched]
    if not t then t = {}; gone[sched] = t end
    t[#t + 1] = d
  end
  -- the ready domains, in ready order: at most as many as requests wanted (each may have only one ready) and
  -- at least FRONTIER_DOMAINS_PER_LEASE, per lane this worker takes, the lanes taking turns by position
  local scan = tonumber(a.scan) or 16
  local window = math.max(scan, n + ahead)
  local lanes = a.lanes or {''}
  local lists, longest = {}, 0
  for l, lane in ipairs(lanes) do
    lists[l] = redis.call('ZRANGEBYSCORE', lane_schedule(ctx, lane), '-inf', now_us, 'LIMIT', '0', window)
    longest = math.max(longest, #lists[l])
  end
  local ready, ready_sched = lists[1] or {}, {}  -- (one lane: its list as it came)
  if #lanes > 1 then
    ready = {}
    for i = 1, longest do
      for l, lane in ipairs(lanes) do
        if lists[l][i] then ready[#ready + 1] = lists[l][i]; ready_sched[#ready] = lane_schedule(ctx, lane) end
      end
    end
  end
  local one_sched = lane_schedule(ctx, lanes[1] or '')
  -- the heads of the next `scan` ready domains, best head-of-queue priority first, then longest ready: read a
  -- chunk at a time, and the next chunk only if the round still wants requests (a head read costs a command and a
  -- table; most rounds are served by the first domains)
  local next_ready = 1
  local function chunk()
    local heads = {}
    local last = math.min(#ready, next_ready + scan - 1)
    for j = next_ready, last do
      local d, sched = ready[j], ready_sched[j] or one_sched
      -- its best two priorities (a member is its priority, its score the opposite: no score to format); one
      -- alone tells pop that its list emptied is the domain emptied
      local q = ctx.prefix .. ':' .. d
      local h = redis.call('ZRANGE', q, '0', '1')
      if #h == 0 then drop(sched, d) else heads[#heads + 1] = {d, -(tonumber(h[1]) or 0), j, h[1], sched, #h == 1, q} end
    end
    next_ready = last + 1
    -- (in ready order already when they share one priority, as most do: a sort calls its comparison 4 times a head)
    local mixed = false
    for i = 2, #heads do if heads[i][2] ~= heads[1][2] then mixed = true; break end end
    if mixed then
      table.sort(heads, function(x, y) if x[2] ~= y[2] then return x[2] < y[2] end return x[3] < y[3] end)
    end
    -- untagged, the run-time limits of every domain of the chunk, in one read (policy: ctx.limit_of)
    if ctx.limits and #heads > 0 then
      local hosts, seen = {}, {}
      for _, h in ipairs(heads) do
        local host = host_of(h[1])
        if not seen[host] then seen[host] = true; hosts[#hosts + 1] = host end
      end
      local values = redis.call('HMGET', ctx.limits, unpack(hosts))
      ctx.limit_of = {}
      for i, host in ipairs(hosts) do ctx.limit_of[host] = values[i] end
    end
    return heads
  end
  -- the leases of the round: their ids numbered from the sequence read once (GET, then one INCRBY), their
  -- deadlines and payloads written once for every domain after the loop
  local seq, numbered = nil, 0
  local zin, hset = {}, {}
  local deadline, holder = deadline_s(now + tonumber(a.ttl)), tostring(a.worker or '') .. '\t' .. string.format('%.3f', now) .. '\t'
  local granted = 0
  -- the same for every domain of the round: the recheck time, the live workers, this worker's slots per domain,
  -- and the domains whose 10-second window the round opened (one ZADD to ctx.known after the loop)
  local recheck = now + conf_numbers(conf).recheck
  local workers, held, opened = tonumber(a.workers) or 1, a.held or {}, {}
  while granted < n + ahead and next_ready <= #ready do
    for _, h in ipairs(chunk()) do
      if granted >= n + ahead then break end
      local d, sched = h[1], h[5]
      local host = host_of(d)  -- (a lane's queue keeps its domain's pace and slots)
      local p = policy(host, conf, ctx)
      local free = p.interval == 0 and p.conc == 0  -- (no pace, no cap: may be leased ahead)
      if granted >= n and not free then
        -- n are leased; only unlimited domains are leased ahead: this one stays as it is for the next round
      elseif p.ready > now then
        move(sched, us(p.ready), d)
      else
        local ak = p.sk .. ':active'
        local k, room = (free and n + ahead or n) - granted, nil
        local share = nil  -- this worker's fair share of the domain's slots, less what it holds
        if p.conc > 0 then
          -- downloads whose lease has not expired (an expired one's slot is free; reclaim removes it)
          room = p.conc - redis.call('ZCOUNT', ak, after_now_s, '+inf')
          k = math.min(k, room)
          if workers > 1 then
            share = math.ceil(p.conc / workers) - (tonumber(held[host]) or 0)
          end
        end
        -- at its concurrency cap, a domain waits (until recheck): a finishing download moves it forward
        local full_share = share ~= nil and share <= 0
        if share ~= nil and share > 0 then k = math.min(k, share) end
        if full_share and k > 0 then
          -- this worker holds its share: the free slots stay for the others, the schedule as it is
        elseif k <= 0 then
          move(sched, us(recheck), d)
        else
          local c, t = 0, p.tat
          while c < k and (p.interval == 0 or t - p.tau <= now) do
            c = c + 1
            t = math.max(t, now) + p.interval
          end
          local items, empty = pop(ctx, d, c, h[4], h[6], h[7])
          take(p, #items)
          if #items > 0 then
            if seq == nil then seq = tonumber(redis.call('GET', ctx.seq) or '0') end
            local zact = {}
            local at = p.factor > 1 and 's@' .. d or '@' .. d  -- (leased while slowed: its success brings it back)
            for _, item in ipairs(items) do
              numbered = numbered + 1
              local id = string.format('%d', seq + numbered) .. at
              zin[#zin + 1] = deadline; zin[#zin + 1] = id
              hset[#hset + 1] = id; hset[#hset + 1] = holder .. item
              if p.conc > 0 then zact[#zact + 1] = deadline; zact[#zact + 1] = ctx.spider .. '/' .. id end
              out[#out + 1] = id
              out[#out + 1] = item
            end
            -- the active set counts a capped domain's downloads (at once: another lane of the domain may be
            -- visited next); a domain without a cap (DOMAIN_CONCURRENCY=0) has nothing to count: no member per
            -- page. (A cap set later counts the downloads leased after it.)
            if #zact > 0 then redis.call('ZADD', ak, unpack(zact)) end
            granted = granted + #items
          end
          if p.new_window then opened[#opened + 1] = now_s; opened[#opened + 1] = host end  -- `limits show`: to 10 s
          if empty == nil then empty = redis.call('EXISTS', h[7]) == 0 end
          if empty then
            drop(sched, d)
          elseif room ~= nil and room <= #items then
            move(sched, us(math.max(p.tat - p.tau, recheck)), d)
          else
            move(sched, us(math.max(p.tat - p.tau, now)), d)
          end
        end
      end
    end
  end
  ctx.limit_of = nil
  if numbered > 0 then
    redis.call('INCRBY', ctx.seq, numbered)
    call_all('ZADD', ctx.inflight, {}, zin)
    call_all('HSET', ctx.leases, {}, hset)
  end
  call_all('ZADD', ctx.known, {}, opened)
  -- the index of recent domains keeps the 1,000 most recent (`limits show` and `status` read 200): a broad crawl
  -- would otherwise keep every domain it ever met, for good (crawlhub:domains outlives every crawl)
  if #opened > 0 then redis.call('ZREMRANGEBYRANK', ctx.known, '0', '-1001') end
  for sched, t in pairs(moved) do call_all('ZADD', sched, {}, t) end
  for sched, t in pairs(gone) do call_all('ZREM', sched, {}, t) end
  if limit > 0 and granted > 0 then redis.call('INCRBY', ctx.budget_used, granted) end
  -- when this worker may next find work (its lanes, and retries coming due), and when anyone may (every lane:
  -- a partitioned frontier's hint, so that a worker never writes "empty" over another lane's work)
  local wake = nil
  local retry = redis.call('ZRANGE', ctx.delayed, '0', '0', 'WITHSCORES')
  if #retry > 0 then wake = tonumber(retry[2]) end
  local mine = {}
  for _, lane in ipairs(lanes) do mine[lane] = true end
  local wake_all = wake
  for _, lane in ipairs(ctx.lanes or lanes) do
    local first = redis.call('ZRANGE', lane_schedule(ctx, lane), '0', '0', 'WITHSCORES')
    if #first > 0 then
      local at = tonumber(first[2]) / 1000000  -- (a schedule is in microseconds)
      if mine[lane] and (wake == nil or at < wake) then wake = at end
      if wake_all == nil or at < wake_all then wake_all = at end
    end
  end
  if wake ~= nil then out[2] = string.format('%.3f', math.max(0, wake - now)) end
  if wake_all ~= nil then out[6] = string.format('%.3f', math.max(0, wake_all - now)) end
end
return out
