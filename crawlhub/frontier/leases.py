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

from crawlhub.frontier.scripts import source

# the scripts, one job per file in crawlhub/frontier/lua/ (crawlhub.frontier.scripts)
TICK, FINISH, RESERVE = source("tick"), source("finish"), source("reserve")
MOVE, RENEW, EXPIRED = source("move"), source("renew"), source("expired")


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
    def for_spider(cls, settings, spider: str) -> Keys:
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
