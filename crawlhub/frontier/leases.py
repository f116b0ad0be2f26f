"""The Redis side of the reliable frontier: atomic Lua operations on a spider's keys.

Every state change of a request is one script, so a crash (of a worker, or
of Redis with AOF) between two steps cannot lose it:

    enqueue   SADD <spider>:dupefilter fp  and, if new, ZADD <spider>:requests
              (optionally ending the lease of the request it was derived from)
    lease     promote due retries from <spider>:delayed, check the budget,
              ZRANGE+ZREM the best request and record it in <spider>:inflight
              (lease id -> deadline) and <spider>:leases (id -> worker, time, payload)
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

_NOW = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
"""

ENQUEUE = """
-- KEYS: dupefilter, queue, inflight, leases
-- ARGV: fp, payload, score, force ('1' = enqueue even if seen), ended lease id or ''
local added = redis.call('SADD', KEYS[1], ARGV[1])
if ARGV[5] ~= '' then
  redis.call('ZREM', KEYS[3], ARGV[5])
  redis.call('HDEL', KEYS[4], ARGV[5])
end
if added == 1 or ARGV[4] == '1' then
  redis.call('ZADD', KEYS[2], ARGV[3], ARGV[2])
  return 1
end
return 0
"""

LEASE = _NOW + """
-- KEYS: queue, inflight, leases, lease_seq, delayed, budget_used, budget
-- ARGV: ttl, worker, n, default_budget
local due = redis.call('ZRANGEBYSCORE', KEYS[5], '-inf', now, 'LIMIT', 0, 100)
for _, p in ipairs(due) do
  local ok, r = pcall(cjson.decode, p)
  local prio = 0
  if ok and type(r) == 'table' and tonumber(r['priority']) then prio = tonumber(r['priority']) end
  redis.call('ZADD', KEYS[1], -prio, p)
  redis.call('ZREM', KEYS[5], p)
end
local n = tonumber(ARGV[3])
local limit = tonumber(redis.call('GET', KEYS[7]) or ARGV[4]) or 0
if limit > 0 then
  local used = tonumber(redis.call('GET', KEYS[6]) or '0')
  if used >= limit then return {-1} end
  n = math.min(n, limit - used)
end
local items = redis.call('ZRANGE', KEYS[1], 0, n - 1)
if #items == 0 then return {} end
redis.call('ZREMRANGEBYRANK', KEYS[1], 0, #items - 1)
if limit > 0 then redis.call('INCRBY', KEYS[6], #items) end
local out = {}
for _, p in ipairs(items) do
  local id = redis.call('INCR', KEYS[4])
  redis.call('ZADD', KEYS[2], now + tonumber(ARGV[1]), id)
  redis.call('HSET', KEYS[3], id, ARGV[2] .. '\\t' .. string.format('%.3f', now) .. '\\t' .. p)
  table.insert(out, id)
  table.insert(out, p)
end
return out
"""

ACK = """
-- KEYS: inflight, leases; ARGV: lease ids
local n = 0
for _, id in ipairs(ARGV) do
  n = n + redis.call('ZREM', KEYS[1], id)
  redis.call('HDEL', KEYS[2], id)
end
return n
"""

MOVE = _NOW + """
-- KEYS: inflight, leases, destination
-- ARGV: lease id, kind ('zset' | 'list' | 'delay'), score (zset) or delay seconds, member
if redis.call('ZREM', KEYS[1], ARGV[1]) == 0 then return 0 end
redis.call('HDEL', KEYS[2], ARGV[1])
if ARGV[2] == 'zset' then
  redis.call('ZADD', KEYS[3], ARGV[3], ARGV[4])
elseif ARGV[2] == 'delay' then
  redis.call('ZADD', KEYS[3], now + tonumber(ARGV[3]), ARGV[4])
else
  redis.call('LPUSH', KEYS[3], ARGV[4])
end
return 1
"""

RENEW = _NOW + """
-- KEYS: inflight; ARGV: ttl, lease ids. Returns the ids that are no longer leased.
local lost = {}
for i = 2, #ARGV do
  if redis.call('ZSCORE', KEYS[1], ARGV[i]) then
    redis.call('ZADD', KEYS[1], 'XX', now + tonumber(ARGV[1]), ARGV[i])
  else
    table.insert(lost, ARGV[i])
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
    queue: str
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


BUDGET_EXHAUSTED = object()


class Frontier:
    """The scripts, bound to one spider's keys."""

    def __init__(self, server, keys: Keys):
        self.server = server
        self.keys = keys
        self._enqueue = server.register_script(ENQUEUE)
        self._lease = server.register_script(LEASE)
        self._ack = server.register_script(ACK)
        self._move = server.register_script(MOVE)
        self._renew = server.register_script(RENEW)
        self._expired = server.register_script(EXPIRED)

    def enqueue(self, fp: str, payload: bytes, priority: int, force: bool = False, ends_lease: str = "") -> bool:
        k = self.keys
        return bool(self._enqueue(
            keys=[k.dupefilter, k.queue, k.inflight, k.leases],
            args=[fp, payload, -priority, "1" if force else "0", ends_lease],
        ))

    def lease(self, worker: str, ttl: float, n: int = 1, budget: int = 0):
        """[(lease_id, payload)], or BUDGET_EXHAUSTED."""
        k = self.keys
        out = self._lease(
            keys=[k.queue, k.inflight, k.leases, k.lease_seq, k.delayed, k.budget_used, k.budget],
            args=[ttl, worker, n, budget],
        )
        if out and out[0] == -1:
            return BUDGET_EXHAUSTED
        return [(out[i].decode() if isinstance(out[i], bytes) else str(out[i]), out[i + 1]) for i in range(0, len(out), 2)]

    def ack(self, lease_ids) -> int:
        lease_ids = list(lease_ids)
        if not lease_ids:
            return 0
        return int(self._ack(keys=[self.keys.inflight, self.keys.leases], args=lease_ids))

    def requeue(self, lease_id: str, payload: bytes, priority: int) -> bool:
        return self._move_to(lease_id, self.keys.queue, "zset", -priority, payload)

    def delay(self, lease_id: str, payload: bytes, seconds: float) -> bool:
        return self._move_to(lease_id, self.keys.delayed, "delay", seconds, payload)

    def dead_letter(self, lease_id: str, record: dict) -> bool:
        return self._move_to(lease_id, self.keys.dlq, "list", 0, json.dumps(record, ensure_ascii=False))

    def _move_to(self, lease_id, dest, kind, score, member) -> bool:
        k = self.keys
        return bool(self._move(keys=[k.inflight, k.leases, dest], args=[lease_id, kind, score, member]))

    def renew(self, lease_ids, ttl: float) -> list[str]:
        lease_ids = list(lease_ids)
        if not lease_ids:
            return []
        return [x.decode() for x in self._renew(keys=[self.keys.inflight], args=[ttl, *lease_ids])]

    def expired(self, limit: int = 100) -> list[tuple[str, str, float, bytes]]:
        """(lease id, worker, taken at, payload) of leases past their deadline."""
        out = self._expired(keys=[self.keys.inflight, self.keys.leases], args=[limit])
        found = []
        for i in range(0, len(out), 2):
            worker, taken, payload = (out[i + 1].split(b"\t", 2) + [b"", b""])[:3] if out[i + 1] else (b"", b"0", b"")
            found.append((out[i].decode(), worker.decode(errors="replace"), float(taken or 0), payload))
        return found

    def counts(self) -> dict[str, int]:
        k = self.keys
        pipe = self.server.pipeline(transaction=False)
        pipe.llen(k.seeds).zcard(k.queue).zcard(k.delayed).zcard(k.inflight).llen(k.dlq)
        seeds, queued, delayed, inflight, dlq = pipe.execute()
        return {"seeds": seeds, "queued": queued, "delayed": delayed, "inflight": inflight, "dlq": dlq}
