-- Shared helpers. A lease id is "<seq>@<queue>" (its domain, or "<domain>#<lane>"; "<seq>s@<queue>" when leased
-- while its domain was slowed: policy's finish), so every script that ends a lease knows its domain and lane
-- without a lookup. No script spells a key name: every
-- name comes in ctx (crawlhub.frontier.keys.PartKeys), all of one partition
-- (one Redis Cluster slot when tagged). Per-domain politeness state:
-- <ctx.domain><d> (a hash) and <ctx.domain><d>:active (a zset of the leases
-- downloading now); untagged, ctx.domain is crawlhub:domain:, shared by all spiders.
--
-- A domain's queue: <prefix>:<d> is a sorted set of the priorities it holds
-- (member = priority, score = -priority) and <prefix>:<d>:<priority> a list of
-- request payloads, first in first out. ctx.counts counts per domain.
local function domain_of(id) return string.match(id, '@(.+)$') end
-- A queue is named by its domain, or "<domain>#<lane>" for work only some workers take (a rung: WORKER_CAPABILITIES,
-- crawlhub.roles). A lane has a schedule of its own (<schedule>:<lane>), so that a worker never scans, nor waits
-- behind, work it cannot take; its politeness (state, active set, limits) is its domain's, shared by every lane.
local function host_of(q) return string.match(q, '^[^#]*') end
local function lane_schedule(ctx, lane)
  if lane == '' then return ctx.schedule end
  return ctx.schedule .. ':' .. lane
end
local function schedule_of(ctx, q) return lane_schedule(ctx, string.match(q, '#(.+)$') or '') end
-- a slot of d's domain is free: each of its lanes may be asked at once (ctx.lanes: every lane of the crawl).
-- With ctx.wakes (tick.lua) the domains are gathered and flush_wakes writes them in one ZADD per lane.
local function wake(ctx, d)
  local host = host_of(d)
  local w = ctx.wakes
  if w then
    if not w.seen[host] then
      w.seen[host] = true
      w.hosts[#w.hosts + 1] = host
    end
    return
  end
  for _, lane in ipairs(ctx.lanes or {''}) do
    redis.call('ZADD', lane_schedule(ctx, lane), 'XX', 'LT', now_us, lane == '' and host or host .. '#' .. lane)
  end
end
-- one command over many arguments (ZADD's pairs, HSET's fields, a list's pushes, members to remove), in chunks
-- of 1000 (unpack has a limit); flags go before them ({'NX'}, {'XX', 'LT'}, {}). Returns the replies summed.
local function call_all(cmd, key, flags, items)
  local count = #items
  if count == 0 then return 0 end
  if count <= 1000 then  -- (most calls: one command, without a table of its arguments)
    local nf = #flags
    if nf == 0 then return tonumber(redis.call(cmd, key, unpack(items))) or 0 end
    if nf == 1 then return tonumber(redis.call(cmd, key, flags[1], unpack(items))) or 0 end
    if nf == 2 then return tonumber(redis.call(cmd, key, flags[1], flags[2], unpack(items))) or 0 end
  end
  local total = 0
  for i = 1, #items, 1000 do
    local args = {key, unpack(flags)}
    for j = i, math.min(i + 999, #items) do args[#args + 1] = items[j] end
    total = total + (tonumber(redis.call(cmd, unpack(args))) or 0)
  end
  return total
end
local function flush_wakes(ctx)
  local w = ctx.wakes
  ctx.wakes = nil
  if not w or #w.hosts == 0 then return end
  for _, lane in ipairs(ctx.lanes or {''}) do
    local args = {}
    for _, host in ipairs(w.hosts) do
      args[#args + 1] = now_us
      args[#args + 1] = lane == '' and host or host .. '#' .. lane
    end
    call_all('ZADD', lane_schedule(ctx, lane), {'XX', 'LT'}, args)
  end
end
-- A batch (ctx.batch, tick.lua): the pushes and slot releases of one call, gathered per list and per
-- domain and written by flush_batch in a few commands per domain instead of four per request (every
-- redis.call costs a script more than its command). Valid while nothing pops or raises a schedule score:
-- tick.lua flushes before its acks and leases. Without ctx.batch each call writes at once.
local function new_batch() return {lists = {}, order = {}, counts = {}, sets = {}, released = {}, by = {}} end
-- free the concurrency slot of a lease; its domain may be asked again at once
local function release(ctx, id)
  local d = domain_of(id)  -- its queue: the domain, or "<domain>#<lane>" (a lane's lease holds a slot of its domain)
  if not d then return 0 end
  local b = ctx.batch
  if b then
    local host = host_of(d)
    b.released[host] = b.released[host] or {}
    table.insert(b.released[host], ctx.spider .. '/' .. id)
    if ctx.freed then ctx.freed[id] = true end
    return 1
  end
  if redis.call('ZREM', ctx.domain .. host_of(d) .. ':active', ctx.spider .. '/' .. id) == 1 then
    wake(ctx, d)
    return 1
  end
  return 0
end
-- a priority's score in its domain's priority set (its opposite), from the priority's text: as text, for a Lua
-- number handed to redis.call is formatted with "%.17g"
local function score_of(prio)
  if prio == '0' then return '0' end
  if string.sub(prio, 1, 1) == '-' then return string.sub(prio, 2) end
  return '-' .. prio
end
-- queue a request in its domain's queue (front = first out: a lease given back)
local function push(ctx, d, prio, payload, front)
  local b = ctx.batch
  if b then
    -- (b.by[d][prio as it came]: a domain's list found again without making its key names, most links' case)
    local by = b.by[d]
    if not by then by = {}; b.by[d] = by end
    local key = prio or ''
    local entry = by[key]
    if not entry then
      local q, p = ctx.prefix .. ':' .. d, tostring(math.floor(tonumber(prio) or 0))
      local l = q .. ':' .. p
      entry = b.lists[l]
      if not entry then
        entry = {tail = {}, head = {}}
        b.lists[l] = entry
        table.insert(b.order, l)
        b.sets[q .. '\t' .. p] = {q, p, d}
      end
      by[key] = entry
    end
    local t = front and entry.head or entry.tail
    t[#t + 1] = payload
    b.counts[d] = (b.counts[d] or 0) + 1
    return
  end
  local q = ctx.prefix .. ':' .. d
  prio = tostring(math.floor(tonumber(prio) or 0))
  if front then redis.call('LPUSH', q .. ':' .. prio, payload) else redis.call('RPUSH', q .. ':' .. prio, payload) end
  redis.call('HINCRBY', ctx.counts, d, '1')
  -- the list's priority in the domain's priority set, the domain in the schedule (NX: a member there keeps
  -- its score). Not only for a new list: a list that outlived its sets (a reset deleting keys one by one
  -- while a worker pushed) would otherwise never be leased again, and nor would what is pushed after it.
  redis.call('ZADD', q, 'NX', score_of(prio), prio)
  redis.call('ZADD', schedule_of(ctx, d), 'NX', '0', d)
end
-- write a batch: each list's requests in one RPUSH (and one LPUSH for those given back: LPUSH of several
-- puts the last first, as one LPUSH each would), each domain's count once, each priority and domain in
-- their sets once, each domain's released slots in one ZREM. The same state as the calls one by one.
local function flush_batch(ctx)
  local b = ctx.batch
  ctx.batch = nil
  if not b then return end
  for _, l in ipairs(b.order) do
    local entry = b.lists[l]
    call_all('RPUSH', l, {}, entry.tail)
    call_all('LPUSH', l, {}, entry.head)
  end
  local scheduled, schedules = {}, {}  -- the domains, one ZADD per schedule
  for _, set in pairs(b.sets) do
    local q, prio, d = set[1], set[2], set[3]
    redis.call('ZADD', q, 'NX', score_of(prio), prio)
    if not scheduled[d] then
      scheduled[d] = true
      local sched = schedule_of(ctx, d)
      local members = schedules[sched]
      if not members then members = {}; schedules[sched] = members end
      members[#members + 1] = '0'
      members[#members + 1] = d
    end
  end
  for sched, members in pairs(schedules) do call_all('ZADD', sched, {'NX'}, members) end
  for d, n in pairs(b.counts) do redis.call('HINCRBY', ctx.counts, d, n) end
  for d, members in pairs(b.released) do
    if call_all('ZREM', ctx.domain .. d .. ':active', {}, members) > 0 then wake(ctx, d) end
  end
end
-- take up to k requests of a domain: best priority first, FIFO within one
-- (first: the best priority, when the caller just read it; only: it is the domain's only one; q: its queue's
-- key, when the caller made it). Returns the requests, and whether the domain's queue is now empty (nil: not
-- known without asking).
local function pop(ctx, d, k, first, only, q)
  q = q or ctx.prefix .. ':' .. d
  local out = {}
  local empty, left = nil, nil
  while #out < k do
    local best = first and {first} or redis.call('ZRANGE', q, '0', '0')
    local alone = first and only
    first = nil
    if #best == 0 then empty = true; break end
    local l = q .. ':' .. best[1]
    local want = k - #out
    local got = redis.call('LPOP', l, want) or {}
    for _, p in ipairs(got) do out[#out + 1] = p end
    if #got == want and alone then
      -- as many as asked from its only priority: its count tells whether any is left, and only a count at 0 (or
      -- one that drifted below) asks the list. (One that drifted above: the next round finds the list empty.)
      left = redis.call('HINCRBY', ctx.counts, d, -#out)
      empty = left <= 0 and redis.call('LLEN', l) == 0
      if empty then redis.call('ZREM', q, best[1]) end
      break
    end
    -- fewer than asked: the list is empty (Redis deleted it); as many: ask whether it is
    if #got < want or redis.call('LLEN', l) == 0 then
      redis.call('ZREM', q, best[1])
      if alone then empty = true; break end  -- the domain's only priority: nothing is left
    else
      empty = false
    end
  end
  -- the domain's count: gone with its queue (a count that drifted is set right), else less what was taken
  if empty then
    redis.call('HDEL', ctx.counts, d)
  elseif #out > 0 and (left or redis.call('HINCRBY', ctx.counts, d, -#out)) <= 0 then
    redis.call('HDEL', ctx.counts, d)
  end
  return out, empty
end
local function priority_of(p)
  local ok, r = pcall(cjson.decode, p)
  if ok and type(r) == 'table' and tonumber(r['priority']) then return tonumber(r['priority']) end
  return 0
end
local function split_delayed(m)
  local d, p = string.match(m, '^([^\t]*)\t(.*)$')
  if d then return d, p end
  return '?', m
end
-- the duplicate filter: true if the request was not seen before (and is now)
-- spec: {'s', bucket key, 64-bit integer} exact, in hash-bucketed integer sets
--       {'b', bitmap key, size in bits, bit positions...}  Bloom filter on a Redis bitmap
--         (made at its full size at once: grown bit by bit, Redis would over-allocate)
--       {'f', key, item}                     Bloom filter of the RedisBloom module
local function first_seen(spec)
  if spec[1] == 's' then return redis.call('SADD', spec[2], spec[3]) == 1 end
  if spec[1] == 'f' then return redis.call('BF.ADD', spec[2], spec[3]) == 1 end
  local new = false
  if redis.call('EXISTS', spec[2]) == 0 then redis.call('SETBIT', spec[2], spec[3] - 1, 0) end
  for i = 4, #spec do
    if redis.call('SETBIT', spec[2], spec[i], 1) == 0 then new = true end
  end
  return new
end
-- the same from the tick's flat arguments: kind, key, extra (the value; for 'b', "bits,pos,pos..."). The bit
-- positions go to SETBIT as the text they came in (a Lua number would be formatted with "%.17g", half a
-- microsecond each); sized: the bitmaps this call has seen made at their full size (one EXISTS a key, not a link)
local function seen_first(kind, key, extra, sized)
  if kind == 's' then return redis.call('SADD', key, extra) == 1 end
  if kind == 'f' then return redis.call('BF.ADD', key, extra) == 1 end
  local bits, positions = string.match(extra, '^([^,]*),?(.*)$')
  if not sized[key] then
    sized[key] = true
    if redis.call('EXISTS', key) == 0 then redis.call('SETBIT', key, string.format('%d', tonumber(bits) - 1), '0') end
  end
  local new = false
  for pos in string.gmatch(positions, '[^,]+') do
    if redis.call('SETBIT', key, pos, '1') == 0 then new = true end
  end
  return new
end
