"""The Redis side of the frontier: atomic Lua operations on a spider's keys.

Every state change of a request is one script, so a crash (of a worker, or
of Redis with AOF) between two steps cannot lose it. Requests wait in one
sorted set per domain (``<spider>:requests:<domain>``, score = -priority);
``<spider>:domains`` schedules the domains that have work by the time each
may next be asked (docs/politeness.md):

    enqueue   SADD <spider>:dupefilter fp and, if new, ZADD the domain's queue
              (optionally ending the lease of the request it was derived from)
    lease     promote due retries from <spider>:delayed, check the budget, then
              among the domains whose time has come (best head priority first)
              take what each domain's rate and concurrency allow: the request
              moves to <spider>:inflight (lease id -> deadline) and
              <spider>:leases (id -> worker, time, payload), and into the
              domain's active set. A domain that must wait is rescheduled, so
              it never blocks the others (no head-of-line blocking).
    finish    a download is over: free its concurrency slot; 429/503 slow the
              domain down for every worker, successes bring it back
    ack       the lease's work is done: forget it
    move      the lease ends elsewhere: back to the queue, to <spider>:delayed
              (retry), or to <spider>:dlq. Only if the lease still exists, so a
              lease ends exactly once even when two workers race to end it.
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
-- queue a request in its domain's queue; a domain with work is in the schedule
local function push(schedule, prefix, d, score, payload)
  redis.call('ZADD', prefix .. ':' .. d, score, payload)
  redis.call('ZADD', schedule, 'NX', 0, d)
end
local function split_delayed(m)
  local d, p = string.match(m, '^([^\\t]*)\\t(.*)$')
  if d then return d, p end
  return '?', m
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
"""

ENQUEUE = _NOW + _HELPERS + """
-- KEYS: dupefilter, schedule, inflight, leases
-- ARGV: fp, payload, score, force ('1' = enqueue even if seen), ended lease id or '', queue prefix, domain, spider
local added = redis.call('SADD', KEYS[1], ARGV[1])
if ARGV[5] ~= '' then
  redis.call('ZREM', KEYS[3], ARGV[5])
  redis.call('HDEL', KEYS[4], ARGV[5])
  release(ARGV[8], ARGV[5], KEYS[2])
end
if added == 1 or ARGV[4] == '1' then
  push(KEYS[2], ARGV[6], ARGV[7], ARGV[3], ARGV[2])
  return 1
end
return 0
"""

PUSH = _NOW + _HELPERS + """
-- KEYS: schedule; ARGV: queue prefix, domain, score, payload
push(KEYS[1], ARGV[1], ARGV[2], ARGV[3], ARGV[4])
return 1
"""

LEASE = _NOW + _HELPERS + _POLICY + """
-- KEYS: schedule, inflight, leases, lease_seq, delayed, budget_used, budget, limits
-- ARGV: ttl, worker, n, default_budget, queue prefix, spider, politeness config (JSON), domains to look at
-- Returns {wait, id, payload, ...}: wait = seconds until something may be ready ('' = nothing queued)
local prefix, spider = ARGV[5], ARGV[6]
local due = redis.call('ZRANGEBYSCORE', KEYS[5], '-inf', now, 'LIMIT', 0, 100)
for _, m in ipairs(due) do
  local d, p = split_delayed(m)
  local ok, r = pcall(cjson.decode, p)
  local prio = 0
  if ok and type(r) == 'table' and tonumber(r['priority']) then prio = tonumber(r['priority']) end
  push(KEYS[1], prefix, d, -prio, p)
  redis.call('ZREM', KEYS[5], m)
end
local n = tonumber(ARGV[3])
local limit = tonumber(redis.call('GET', KEYS[7]) or ARGV[4]) or 0
if limit > 0 then
  local used = tonumber(redis.call('GET', KEYS[6]) or '0')
  if used >= limit then return {-1} end
  n = math.min(n, limit - used)
end
local conf = cjson.decode(ARGV[7])
local ttl = tonumber(ARGV[1])
-- ready domains, best head-of-queue priority first, then longest ready
local heads = {}
for i, d in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[8]))) do
  local h = redis.call('ZRANGE', prefix .. ':' .. d, 0, 0, 'WITHSCORES')
  if #h == 0 then redis.call('ZREM', KEYS[1], d) else table.insert(heads, {d, tonumber(h[2]), i}) end
end
table.sort(heads, function(a, b) if a[2] ~= b[2] then return a[2] < b[2] end return a[3] < b[3] end)
local out = {''}
local granted = 0
for _, h in ipairs(heads) do
  if granted >= n then break end
  local d = h[1]
  local q = prefix .. ':' .. d
  local p = policy(d, conf, KEYS[8])
  if p.ready > now then
    redis.call('ZADD', KEYS[1], p.ready, d)
  else
    local ak = p.sk .. ':active'
    local k, room = n - granted, nil
    if p.conc > 0 then
      redis.call('ZREMRANGEBYSCORE', ak, '-inf', now)
      room = p.conc - redis.call('ZCARD', ak)
      k = math.min(k, room)
    end
    -- at its concurrency cap, a domain waits: a finishing download moves it forward
    local recheck = now + (tonumber(conf['recheck']) or 1)
    if k <= 0 then
      redis.call('ZADD', KEYS[1], recheck, d)
    else
      local c, t = 0, p.tat
      while c < k and (p.interval == 0 or t - p.tau <= now) do
        c = c + 1
        t = math.max(t, now) + p.interval
      end
      local items = redis.call('ZRANGE', q, 0, c - 1)
      redis.call('ZREMRANGEBYRANK', q, 0, #items - 1)
      take(p, #items)
      for _, item in ipairs(items) do
        local id = redis.call('INCR', KEYS[4]) .. '@' .. d
        redis.call('ZADD', KEYS[2], now + ttl, id)
        redis.call('HSET', KEYS[3], id, ARGV[2] .. '\\t' .. string.format('%.3f', now) .. '\\t' .. item)
        redis.call('ZADD', ak, now + ttl, spider .. '/' .. id)
        table.insert(out, id)
        table.insert(out, item)
        granted = granted + 1
      end
      redis.call('ZADD', 'crawlhub:domains', now, d)
      if redis.call('ZCARD', q) == 0 then
        redis.call('ZREM', KEYS[1], d)
      elseif room ~= nil and room <= #items then
        redis.call('ZADD', KEYS[1], math.max(p.tat - p.tau, recheck), d)
      else
        redis.call('ZADD', KEYS[1], math.max(p.tat - p.tau, now), d)
      end
    end
  end
end
if limit > 0 and granted > 0 then redis.call('INCRBY', KEYS[6], granted) end
local wake = nil
local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
if #first > 0 then wake = tonumber(first[2]) end
local retry = redis.call('ZRANGE', KEYS[5], 0, 0, 'WITHSCORES')
if #retry > 0 and (wake == nil or tonumber(retry[2]) < wake) then wake = tonumber(retry[2]) end
if wake ~= nil then out[1] = string.format('%.3f', math.max(0, wake - now)) end
return out
"""

FINISH = _NOW + _HELPERS + """
-- A download of a domain is over (response or error): free its concurrency
-- slot and adapt the domain's pace.
-- KEYS: schedule of the finishing spider
-- ARGV: domain, spider, lease id or '', outcome ('ok' | 'slow' | ''), retry-after seconds, max factor, recovery
local d = ARGV[1]
local sk = DOMAIN .. d
if ARGV[3] ~= '' then release(ARGV[2], ARGV[3], KEYS[1]) end
local f = tonumber(redis.call('HGET', sk, 'factor') or '1')
if ARGV[4] == 'slow' then
  f = math.min(math.max(f, 1) * 2, tonumber(ARGV[6]))
  local untl = now + tonumber(ARGV[5])
  local old = tonumber(redis.call('HGET', sk, 'until') or '0')
  redis.call('HSET', sk, 'factor', f, 'until', string.format('%.3f', math.max(untl, old)))
  redis.call('HINCRBY', sk, 'slowdowns', 1)
  redis.call('EXPIRE', sk, 604800)
elseif ARGV[4] == 'ok' and f > 1 then
  f = f * tonumber(ARGV[7])
  if f < 1.05 then
    f = 1
    redis.call('HDEL', sk, 'factor')
  else
    redis.call('HSET', sk, 'factor', f)
  end
end
return tostring(f)
"""

RESERVE = _NOW + _HELPERS + _POLICY + """
-- A request that holds no lease (robots.txt) takes the domain's next slot.
-- KEYS: limits; ARGV: domain, politeness config (JSON). Returns seconds to wait.
local p = policy(ARGV[1], cjson.decode(ARGV[2]), KEYS[1])
local at = math.max(p.ready, now)
take(p, 1)
return string.format('%.3f', at - now)
"""

ACK = _NOW + _HELPERS + """
-- KEYS: inflight, leases, schedule; ARGV: spider, lease ids
local n = 0
for i = 2, #ARGV do
  n = n + redis.call('ZREM', KEYS[1], ARGV[i])
  redis.call('HDEL', KEYS[2], ARGV[i])
  release(ARGV[1], ARGV[i], KEYS[3])
end
return n
"""

MOVE = _NOW + _HELPERS + """
-- KEYS: inflight, leases, destination, schedule
-- ARGV: lease id, kind ('queue' | 'list' | 'delay'), score (queue) or delay seconds, member, spider, queue prefix
if redis.call('ZREM', KEYS[1], ARGV[1]) == 0 then return 0 end
redis.call('HDEL', KEYS[2], ARGV[1])
release(ARGV[5], ARGV[1], KEYS[4])
local d = domain_of(ARGV[1]) or '?'
if ARGV[2] == 'queue' then
  push(KEYS[4], ARGV[6], d, ARGV[3], ARGV[4])
elseif ARGV[2] == 'delay' then
  redis.call('ZADD', KEYS[3], now + tonumber(ARGV[3]), d .. '\\t' .. ARGV[4])
else
  redis.call('LPUSH', KEYS[3], ARGV[4])
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
    queue: str  # prefix: one sorted set per domain, <queue>:<domain>
    schedule: str  # domains with queued requests -> when each may be asked next
    dupefilter: str
    inflight: str
    leases: str
    lease_seq: str
    delayed: str
    dlq: str
    budget: str
    budget_used: str
    reclaim_lock: str
    stats: str

    @classmethod
    def for_spider(cls, settings, spider: str) -> "Keys":
        return cls(
            seeds=settings.get("REDIS_START_URLS_KEY", "%(name)s:start_urls") % {"name": spider},
            queue=settings.get("SCHEDULER_QUEUE_KEY", "%(spider)s:requests") % {"spider": spider},
            schedule=f"{spider}:domains",
            dupefilter=settings.get("SCHEDULER_DUPEFILTER_KEY", "%(spider)s:dupefilter") % {"spider": spider},
            inflight=f"{spider}:inflight",
            leases=f"{spider}:leases",
            lease_seq=f"{spider}:lease_seq",
            delayed=f"{spider}:delayed",
            dlq=f"{spider}:dlq",
            budget=f"{spider}:budget",
            budget_used=f"{spider}:budget_used",
            reclaim_lock=f"{spider}:reclaim_lock",
            stats=f"{spider}:stats",
        )

    def domain_queue(self, domain: str) -> str:
        return f"{self.queue}:{domain}"


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


class Frontier:
    """The scripts, bound to one spider's keys.

    ``politeness`` is the JSON-able config of crawlhub.politeness.Politeness
    (default rate and concurrency, per-domain limits from settings, burst...).
    """

    LIMITS = "crawlhub:limits"

    def __init__(self, server, keys: Keys, spider: str = "", politeness: dict | None = None, scan: int = 16):
        self.server = server
        self.keys = keys
        self.spider = spider or keys.inflight.rsplit(":", 1)[0]
        self.politeness = json.dumps(politeness or {})
        self.scan = scan
        self._enqueue = server.register_script(ENQUEUE)
        self._push = server.register_script(PUSH)
        self._lease = server.register_script(LEASE)
        self._ack = server.register_script(ACK)
        self._move = server.register_script(MOVE)
        self._renew = server.register_script(RENEW)
        self._expired = server.register_script(EXPIRED)

    def enqueue(
        self, fp: str, payload: bytes, priority: int, force: bool = False, ends_lease: str = "", domain: str = "?"
    ) -> bool:
        k = self.keys
        return bool(self._enqueue(
            keys=[k.dupefilter, k.schedule, k.inflight, k.leases],
            args=[fp, payload, -priority, "1" if force else "0", ends_lease, k.queue, domain, self.spider],
        ))

    def push(self, payload: bytes | str, priority: int, domain: str) -> None:
        """Queue a request without the duplicate filter (a requeued dead letter)."""
        self._push(keys=[self.keys.schedule], args=[self.keys.queue, domain, -priority, payload])

    def lease(self, worker: str, ttl: float, n: int = 1, budget: int = 0):
        """(leases, wait): leases = [(lease_id, payload)], or BUDGET_EXHAUSTED.

        wait: seconds until a queued or delayed request may be ready (None when
        there is none), so an idle worker knows when to ask again.
        """
        k = self.keys
        out = self._lease(
            keys=[k.schedule, k.inflight, k.leases, k.lease_seq, k.delayed, k.budget_used, k.budget, self.LIMITS],
            args=[ttl, worker, n, budget, k.queue, self.spider, self.politeness, self.scan],
        )
        if out and out[0] == -1:
            return BUDGET_EXHAUSTED, None
        wait = float(out[0]) if out[0] else None
        taken = [(_text(out[i]), out[i + 1]) for i in range(1, len(out), 2)]
        return taken, wait

    def ack(self, lease_ids) -> int:
        lease_ids = list(lease_ids)
        if not lease_ids:
            return 0
        k = self.keys
        return int(self._ack(keys=[k.inflight, k.leases, k.schedule], args=[self.spider, *lease_ids]))

    def requeue(self, lease_id: str, payload: bytes, priority: int) -> bool:
        return self._move_to(lease_id, self.keys.queue, "queue", -priority, payload)

    def delay(self, lease_id: str, payload: bytes, seconds: float) -> bool:
        return self._move_to(lease_id, self.keys.delayed, "delay", seconds, payload)

    def dead_letter(self, lease_id: str, record: dict) -> bool:
        return self._move_to(lease_id, self.keys.dlq, "list", 0, json.dumps(record, ensure_ascii=False))

    def _move_to(self, lease_id, dest, kind, score, member) -> bool:
        k = self.keys
        return bool(self._move(
            keys=[k.inflight, k.leases, dest, k.schedule],
            args=[lease_id, kind, score, member, self.spider, k.queue],
        ))

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

    def domains(self) -> list[str]:
        """The domains with queued requests."""
        return [_text(d) for d in self.server.zrange(self.keys.schedule, 0, -1)]

    def queued(self) -> dict[str, int]:
        """Queued requests per domain."""
        domains = self.domains()
        pipe = self.server.pipeline(transaction=False)
        for d in domains:
            pipe.zcard(self.keys.domain_queue(d))
        return dict(zip(domains, pipe.execute(), strict=True))

    def pending(self) -> bool:
        """Anything queued or waiting to retry (cheap: two ZCARDs)."""
        pipe = self.server.pipeline(transaction=False)
        pipe.zcard(self.keys.schedule).zcard(self.keys.delayed)
        return any(pipe.execute())

    def counts(self) -> dict[str, int]:
        k = self.keys
        pipe = self.server.pipeline(transaction=False)
        pipe.llen(k.seeds).zcard(k.delayed).zcard(k.inflight).llen(k.dlq)
        seeds, delayed, inflight, dlq = pipe.execute()
        return {"seeds": seeds, "queued": sum(self.queued().values()), "delayed": delayed, "inflight": inflight, "dlq": dlq}
