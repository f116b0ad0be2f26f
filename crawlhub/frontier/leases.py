"""The Redis side of the frontier: atomic Lua operations on a spider's keys.

Every state change of a request is one script, so a crash (of a worker, or
of Redis with AOF) between two steps cannot lose it. Requests wait per
domain and priority in FIFO lists (``<spider>:requests:<domain>:<priority>``);
``<spider>:domains`` schedules the domains that have work by the time each
may next be asked (docs/politeness.md, docs/frontier.md).

    tick      one call per round of a worker (docs/frontier.md):
              enqueue   check the duplicate filter and, if new, queue the
                        request (optionally ending the lease of the request
                        it was derived from: a redirect)
              finish    downloads that are over free their domain's slot;
                        successes bring a slowed domain back
              ack       leases whose work is done are forgotten
              lease     promote due retries from <spider>:delayed, check the
                        budget, then among the domains whose time has come
                        (best head priority first) take what each domain's
                        rate and concurrency allow: the request moves to
                        <spider>:inflight (lease id -> deadline) and
                        <spider>:leases (id -> worker, time, payload), and
                        into the domain's active set. A domain that must
                        wait is rescheduled, so it never blocks the others.
    finish    a slow-down (429/503) at once, for every worker
    move      the lease ends elsewhere: back to the front of its queue, to
              <spider>:delayed (retry), or to <spider>:dlq. Only if the lease
              still exists, so a lease ends exactly once even when two
              workers race to end it.
    renew     push live leases' deadlines forward (heartbeat)

Time is Redis's own clock (TIME), so workers' clocks do not matter.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from urllib.parse import urlsplit

_NOW = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
"""

# Shared Lua helpers. A lease id is "<seq>@<domain>", so every script that
# ends a lease knows its domain without a lookup. Per-domain state is shared
# by all spiders (politeness belongs to the domain): crawlhub:domain:<d> (a
# hash) and crawlhub:domain:<d>:active (a zset of the leases downloading now).
#
# A domain's queue: <prefix>:<d> is a sorted set of the priorities it holds
# (member = priority, score = -priority) and <prefix>:<d>:<priority> a list of
# request payloads, first in first out. <spider>:queued counts per domain.
_HELPERS = """
local DOMAIN = 'crawlhub:domain:'
local function domain_of(id) return string.match(id, '@(.+)$') end
-- free the concurrency slot of a lease; its domain may be asked again at once
local function release(spider, id, schedule)
  local d = domain_of(id)
  if d and redis.call('ZREM', DOMAIN .. d .. ':active', spider .. '/' .. id) == 1 then
    redis.call('ZADD', schedule, 'XX', 'LT', now, d)
    return 1
  end
  return 0
end
-- queue a request in its domain's queue (front = first out: a lease given back)
local function push(ctx, d, prio, payload, front)
  local q = ctx.prefix .. ':' .. d
  prio = tostring(math.floor(tonumber(prio) or 0))
  if front then redis.call('LPUSH', q .. ':' .. prio, payload) else redis.call('RPUSH', q .. ':' .. prio, payload) end
  redis.call('ZADD', q, -tonumber(prio), prio)
  redis.call('HINCRBY', ctx.counts, d, 1)
  redis.call('ZADD', ctx.schedule, 'NX', 0, d)
end
-- take up to k requests of a domain: best priority first, FIFO within one
local function pop(ctx, d, k)
  local q = ctx.prefix .. ':' .. d
  local out = {}
  while #out < k do
    local best = redis.call('ZRANGE', q, 0, 0)
    if #best == 0 then break end
    local l = q .. ':' .. best[1]
    local got = redis.call('LPOP', l, k - #out)
    if got then for _, p in ipairs(got) do table.insert(out, p) end end
    if redis.call('LLEN', l) == 0 then redis.call('ZREM', q, best[1]) end
  end
  if #out > 0 and redis.call('HINCRBY', ctx.counts, d, -#out) <= 0 then redis.call('HDEL', ctx.counts, d) end
  return out
end
local function priority_of(p)
  local ok, r = pcall(cjson.decode, p)
  if ok and type(r) == 'table' and tonumber(r['priority']) then return tonumber(r['priority']) end
  return 0
end
local function split_delayed(m)
  local d, p = string.match(m, '^([^\\t]*)\\t(.*)$')
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
"""

# The politeness of one domain, computed from its state and limits:
# interval between requests (rate, robots Crawl-delay and slow-down factor),
# burst tolerance, the time the domain is next ready, and the concurrency cap.
_POLICY = """
local function policy(d, conf, limits_key)
  local sk = DOMAIN .. d
  local st = redis.call('HMGET', sk, 'tat', 'factor', 'until', 'delay')
  local rate, conc = tonumber(conf['rate']) or 0, tonumber(conf['concurrency']) or 0
  local lim = redis.call('HGET', limits_key, d)
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
  if factor > 1 then interval = math.max(interval, tonumber(conf['base']) or 0.5) * factor end
  local tat = tonumber(st[1]) or 0
  local tau = interval * ((tonumber(conf['burst']) or 1) - 1)
  return {sk = sk, interval = interval, tau = tau, tat = tat, conc = conc,
          ready = math.max(tat - tau, tonumber(st[3]) or 0)}
end
-- take n request slots of a domain at time now (GCRA); counts the rate window
local function take(p, n)
  for i = 1, n do p.tat = math.max(p.tat, now) + p.interval end
  local win = math.floor(now / 10)
  local w = redis.call('HMGET', p.sk, 'win', 'cnt')
  if tonumber(w[1]) == win then
    redis.call('HINCRBY', p.sk, 'cnt', n)
  else
    local prev = 0
    if tonumber(w[1]) == win - 1 then prev = tonumber(w[2]) or 0 end
    redis.call('HSET', p.sk, 'win', win, 'cnt', n, 'prev', prev)
  end
  redis.call('HSET', p.sk, 'tat', string.format('%.6f', p.tat), 'last', string.format('%.3f', now))
  redis.call('EXPIRE', p.sk, 604800)
end
-- a download is over: free its slot; 'slow' (429/503) slows the domain, 'ok' brings it back
local function finish(ctx, d, lease_id, outcome, retry_after)
  local sk = DOMAIN .. d
  if lease_id ~= '' then release(ctx.spider, lease_id, ctx.schedule) end
  local f = tonumber(redis.call('HGET', sk, 'factor') or '1')
  if outcome == 'slow' then
    f = math.min(math.max(f, 1) * 2, tonumber(ctx.factor_max) or 32)
    local untl = now + (tonumber(retry_after) or 0)
    local old = tonumber(redis.call('HGET', sk, 'until') or '0')
    redis.call('HSET', sk, 'factor', f, 'until', string.format('%.6f', math.max(untl, old)))
    redis.call('HINCRBY', sk, 'slowdowns', 1)
    redis.call('EXPIRE', sk, 604800)
  elseif outcome == 'ok' and f > 1 then
    f = f * (tonumber(ctx.recovery) or 0.8)
    if f < 1.05 then
      f = 1
      redis.call('HDEL', sk, 'factor')
    else
      redis.call('HSET', sk, 'factor', f)
    end
  end
  return f
end
"""

TICK = _NOW + _HELPERS + _POLICY + """
-- Everything a worker has to tell the frontier, and the requests it takes,
-- in one call: ARGV[1] is JSON
--   {ctx: {spider, prefix, schedule, counts, inflight, leases, seq, delayed,
--          budget_used, budget, limits, seen},
--    enq: [[dupefilter spec, payload, priority, force, ended lease id, domain], ...],
--    fin: [[domain, lease id, outcome, retry-after], ...],
--    ack: [lease id, ...],
--    n, ttl, worker, default_budget, conf (politeness), scan, factor_max, recovery,
--    workers (live workers of the spider), held ({domain: slots this worker holds})}
-- With several workers, one worker takes at most ceil(concurrency / workers) of a
-- domain's slots, so that the slots are shared by the workers, not held by one.
-- In this order: enqueue (so a page's links are queued before its lease
-- ends), finish, ack, then lease n requests.
-- Returns {'ok' | 'budget' | 'paused', wait ('' = nothing queued or delayed), added, acked, id, payload, ...}
local a = cjson.decode(ARGV[1])
local ctx = a.ctx
ctx.factor_max, ctx.recovery = a.factor_max, a.recovery
local added = 0
for _, e in ipairs(a.enq or {}) do
  local new = first_seen(e[1])
  if new then redis.call('INCR', ctx.seen) end
  if e[5] ~= '' then
    redis.call('ZREM', ctx.inflight, e[5])
    redis.call('HDEL', ctx.leases, e[5])
    release(ctx.spider, e[5], ctx.schedule)
  end
  if new or e[4] then
    -- a request that replaces a lease (a redirect, the browser fallback, another
    -- proxy) is the same page: first out of its queue, like a lease given back
    push(ctx, e[6], e[3], e[2], e[5] ~= '')
    added = added + 1
  end
end
for _, f in ipairs(a.fin or {}) do finish(ctx, f[1], f[2], f[3], f[4]) end
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
          redis.call('HSET', ctx.leases, id, a.worker .. '\\t' .. string.format('%.3f', now) .. '\\t' .. item)
          redis.call('ZADD', ak, now + ttl, ctx.spider .. '/' .. id)
          table.insert(out, id)
          table.insert(out, item)
          granted = granted + 1
        end
        redis.call('ZADD', 'crawlhub:domains', now, d)
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
"""

FINISH = _NOW + _HELPERS + _POLICY + """
-- One download is over, now (a slow-down must reach the other workers at once).
-- ARGV: JSON ctx (spider, schedule, factor_max, recovery), domain, lease id or '', outcome, retry-after
local ctx = cjson.decode(ARGV[1])
return tostring(finish(ctx, ARGV[2], ARGV[3], ARGV[4], ARGV[5]))
"""

RESERVE = _NOW + _HELPERS + _POLICY + """
-- A request that holds no lease takes the domain's next slot.
-- KEYS: limits; ARGV: domain, politeness config (JSON). Returns seconds to wait.
local p = policy(ARGV[1], cjson.decode(ARGV[2]), KEYS[1])
local at = math.max(p.ready, now)
take(p, 1)
return string.format('%.3f', at - now)
"""

MOVE = _NOW + _HELPERS + """
-- ARGV: JSON ctx, lease id, kind ('queue' | 'list' | 'delay' | 'push'), priority or delay seconds, member, domain ('push')
-- queue: a lease goes back to the front of its domain's queue; push: a new request
-- (a requeued dead letter) to the back; delay: to <spider>:delayed; list: LPUSH (the DLQ)
local ctx = cjson.decode(ARGV[1])
local id, kind = ARGV[2], ARGV[3]
if kind == 'push' then
  push(ctx, ARGV[6], ARGV[4], ARGV[5], false)
  return 1
end
if redis.call('ZREM', ctx.inflight, id) == 0 then return 0 end
redis.call('HDEL', ctx.leases, id)
release(ctx.spider, id, ctx.schedule)
local d = domain_of(id) or '?'
if kind == 'queue' then
  push(ctx, d, ARGV[4], ARGV[5], true)
elseif kind == 'delay' then
  redis.call('ZADD', ctx.delayed, now + tonumber(ARGV[4]), d .. '\\t' .. ARGV[5])
else
  redis.call('LPUSH', ctx.dlq, ARGV[5])
end
return 1
"""

RENEW = _NOW + _HELPERS + """
-- KEYS: inflight; ARGV: ttl, spider, lease ids. Returns the ids that are no longer leased.
local lost = {}
for i = 3, #ARGV do
  local id = ARGV[i]
  if redis.call('ZSCORE', KEYS[1], id) then
    redis.call('ZADD', KEYS[1], 'XX', now + tonumber(ARGV[1]), id)
    local d = domain_of(id)
    if d then redis.call('ZADD', DOMAIN .. d .. ':active', 'XX', now + tonumber(ARGV[1]), ARGV[2] .. '/' .. id) end
  else
    table.insert(lost, id)
  end
end
return lost
"""

EXPIRED = _NOW + """
-- KEYS: inflight, leases; ARGV: max. Returns id, data pairs of leases past their deadline.
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[1]))
local out = {}
for _, id in ipairs(ids) do
  table.insert(out, id)
  table.insert(out, redis.call('HGET', KEYS[2], id) or '')
end
return out
"""


@dataclass(frozen=True)
class Keys:
    seeds: str
    queue: str  # prefix: per domain, <queue>:<domain> (priorities) and <queue>:<domain>:<priority> (lists)
    schedule: str  # domains with queued requests -> when each may be asked next
    queued: str  # domain -> requests queued
    dupefilter: str  # prefix of the filter's keys
    seen: str  # URLs the filter took in
    inflight: str
    leases: str
    lease_seq: str
    delayed: str
    dlq: str
    budget: str
    budget_used: str
    reclaim_lock: str
    stats: str
    paused: str  # set by `crawlhub pause`: no worker leases while it exists

    @classmethod
    def for_spider(cls, settings, spider: str) -> "Keys":
        dupefilter = settings.get("SCHEDULER_DUPEFILTER_KEY", "%(spider)s:dupefilter") % {"spider": spider}
        return cls(
            seeds=settings.get("REDIS_START_URLS_KEY", "%(name)s:start_urls") % {"name": spider},
            queue=settings.get("SCHEDULER_QUEUE_KEY", "%(spider)s:requests") % {"spider": spider},
            schedule=f"{spider}:domains",
            queued=f"{spider}:queued",
            dupefilter=dupefilter,
            seen=f"{dupefilter}:count",
            inflight=f"{spider}:inflight",
            leases=f"{spider}:leases",
            lease_seq=f"{spider}:lease_seq",
            delayed=f"{spider}:delayed",
            dlq=f"{spider}:dlq",
            budget=f"{spider}:budget",
            budget_used=f"{spider}:budget_used",
            reclaim_lock=f"{spider}:reclaim_lock",
            stats=f"{spider}:stats",
            paused=f"{spider}:paused",
        )


BUDGET_EXHAUSTED = object()

DEFAULT_PORTS = {"http": 80, "https": 443}


def domain_of(url: str) -> str:
    """The politeness unit of a URL: its host, with the port when it is not the scheme's default."""
    parts = urlsplit(url)
    host = (parts.hostname or "").lower()
    try:
        port = parts.port
    except ValueError:
        port = None
    if port and port != DEFAULT_PORTS.get(parts.scheme):
        host = f"{host}:{port}"
    return host or "?"


def lease_domain(lease_id: str) -> str:
    return lease_id.partition("@")[2]


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


@dataclass
class Tick:
    """What one call to the frontier returned."""

    taken: list  # [(lease id, payload)]
    wait: float | None  # seconds until a queued or delayed request may be ready; None = there is none
    added: int = 0  # enqueued requests that were new (or forced)
    acked: int = 0
    budget_exhausted: bool = False
    paused: bool = False


class Frontier:
    """The scripts, bound to one spider's keys.

    ``politeness`` is the JSON-able config of crawlhub.frontier.politeness.Politeness
    (default rate and concurrency, per-domain limits from settings, burst...);
    ``dupefilter`` turns a fingerprint into the filter's operation
    (crawlhub.frontier.dupefilter).
    """

    LIMITS = "crawlhub:limits"

    def __init__(self, server, keys: Keys, spider: str = "", politeness: dict | None = None, scan: int = 16,
                 dupefilter=None, factor_max: float = 32.0, recovery: float = 0.8):
        from crawlhub.frontier.dupefilter import ExactFilter

        self.server = server
        self.keys = keys
        self.spider = spider or keys.inflight.rsplit(":", 1)[0]
        self.politeness = politeness or {}
        self.scan = scan
        self.dupefilter = dupefilter or ExactFilter(keys.dupefilter)
        self.factor_max, self.recovery = factor_max, recovery
        k = keys
        self.ctx = {
            "spider": self.spider, "prefix": k.queue, "schedule": k.schedule, "counts": k.queued,
            "inflight": k.inflight, "leases": k.leases, "seq": k.lease_seq, "delayed": k.delayed, "dlq": k.dlq,
            "budget_used": k.budget_used, "budget": k.budget, "limits": self.LIMITS, "seen": k.seen, "paused": k.paused,
            "factor_max": factor_max, "recovery": recovery,
        }
        self._ctx_json = json.dumps(self.ctx)
        self._tick = server.register_script(TICK)
        self._finish = server.register_script(FINISH)
        self._move = server.register_script(MOVE)
        self._renew = server.register_script(RENEW)
        self._expired = server.register_script(EXPIRED)

    # -- the one call a worker makes per round -------------------------------------------------
    def tick(self, enqueues=(), finishes=(), acks=(), n: int = 0, worker: str = "", ttl: float = 60.0,
             budget: int = 0, workers: int = 1, held: dict[str, int] | None = None) -> Tick:
        """Enqueue, report finished downloads, ack, and take up to ``n`` requests, in one round trip.

        enqueues: (fingerprint, payload, priority, force, ended lease id, domain) tuples;
        finishes: (domain, lease id, outcome, retry-after) tuples; workers: live workers of
        the spider; held: leases this worker holds per domain (its fair share of each domain's slots).
        """
        enq = [[self.dupefilter.spec(fp), _text(payload), int(priority), bool(force), ends, domain]
               for fp, payload, priority, force, ends, domain in enqueues]
        args = {"ctx": self.ctx, "enq": enq, "fin": [list(f) for f in finishes], "ack": list(acks), "n": n,
                "ttl": ttl, "worker": worker, "default_budget": budget, "conf": self.politeness or {"rate": 0},
                "scan": self.scan, "factor_max": self.factor_max, "recovery": self.recovery}
        if workers > 1:
            args["workers"], args["held"] = workers, held or {}
        out = self._tick(args=[json.dumps(args, separators=(",", ":"), ensure_ascii=False)])
        taken = [(_text(out[i]), out[i + 1]) for i in range(4, len(out), 2)]
        return Tick(taken, float(out[1]) if out[1] else None, int(out[2]), int(out[3]), out[0] == b"budget",
                    out[0] == b"paused")

    def enqueue(self, fp, payload: bytes, priority: int, force: bool = False, ends_lease: str = "", domain: str = "?") -> bool:
        return bool(self.tick([(fp, payload, priority, force, ends_lease, domain)]).added)

    def lease(self, worker: str, ttl: float, n: int = 1, budget: int = 0):
        """(leases, wait): leases = [(lease_id, payload)], or BUDGET_EXHAUSTED."""
        result = self.tick(n=n, worker=worker, ttl=ttl, budget=budget)
        if result.budget_exhausted:
            return BUDGET_EXHAUSTED, None
        return result.taken, result.wait

    def ack(self, lease_ids) -> int:
        lease_ids = list(lease_ids)
        return self.tick(acks=lease_ids).acked if lease_ids else 0

    def finish(self, domain: str, lease_id: str, outcome: str, retry_after: float) -> float:
        return float(self._finish(args=[self._ctx_json, domain, lease_id, outcome, retry_after]))

    # -- how a lease ends elsewhere ---------------------------------------------------------------
    def requeue(self, lease_id: str, payload: bytes, priority: int) -> bool:
        """Give a lease back: first in line again in its domain's queue."""
        return self._move_to(lease_id, "queue", priority, payload)

    def delay(self, lease_id: str, payload: bytes, seconds: float) -> bool:
        return self._move_to(lease_id, "delay", seconds, payload)

    def dead_letter(self, lease_id: str, record: dict) -> bool:
        return self._move_to(lease_id, "list", 0, json.dumps(record, ensure_ascii=False))

    def push(self, payload: bytes | str, priority: int, domain: str) -> None:
        """Queue a request without the duplicate filter (a requeued dead letter)."""
        self._move(args=[self._ctx_json, "", "push", priority, payload, domain])

    def _move_to(self, lease_id, kind, number, member) -> bool:
        return bool(self._move(args=[self._ctx_json, lease_id, kind, number, member, ""]))

    def renew(self, lease_ids, ttl: float) -> list[str]:
        lease_ids = list(lease_ids)
        if not lease_ids:
            return []
        return [x.decode() for x in self._renew(keys=[self.keys.inflight], args=[ttl, self.spider, *lease_ids])]

    def expired(self, limit: int = 100) -> list[tuple[str, str, float, bytes]]:
        """(lease id, worker, taken at, payload) of leases past their deadline."""
        out = self._expired(keys=[self.keys.inflight, self.keys.leases], args=[limit])
        found = []
        for i in range(0, len(out), 2):
            worker, taken, payload = (out[i + 1].split(b"\t", 2) + [b"", b""])[:3] if out[i + 1] else (b"", b"0", b"")
            found.append((out[i].decode(), worker.decode(errors="replace"), float(taken or 0), payload))
        return found

    # -- what is there ------------------------------------------------------------------------------
    def queued(self) -> dict[str, int]:
        """Queued requests per domain."""
        return {_text(d): int(n) for d, n in self.server.hgetall(self.keys.queued).items()}

    def pending(self) -> bool:
        """Anything queued or waiting to retry (cheap: two ZCARDs)."""
        pipe = self.server.pipeline(transaction=False)
        pipe.zcard(self.keys.schedule).zcard(self.keys.delayed)
        return any(pipe.execute())

    def counts(self) -> dict[str, int]:
        k = self.keys
        pipe = self.server.pipeline(transaction=False)
        pipe.llen(k.seeds).zcard(k.delayed).zcard(k.inflight).llen(k.dlq).get(k.seen)
        seeds, delayed, inflight, dlq, seen = pipe.execute()
        return {"seeds": seeds, "queued": sum(self.queued().values()), "delayed": delayed, "inflight": inflight,
                "dlq": dlq, "seen": int(seen or 0)}
