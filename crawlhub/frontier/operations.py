"""The Redis side of the frontier: its Lua scripts bound to one spider's keys.

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
                        budget and the pause, then among the domains whose
                        time has come (best head priority first) take what
                        each domain's rate and concurrency allow
    finish    a slow-down (429/503) at once, for every worker
    move      the lease ends elsewhere: back to the front of its queue, to
              <spider>:delayed (retry), or to <spider>:dlq. Only if the lease
              still exists, so a lease ends exactly once even when two
              workers race to end it.
    renew     push live leases' deadlines forward (heartbeat)
    expired   the leases past their deadline (their worker died)
    refresh   due pages from the status store into their domains' queues,
              exactly once per due time (crawlhub.revisit)

Time is Redis's own clock (TIME), so workers' clocks do not matter. This
class holds no state of a worker's: :class:`crawlhub.frontier.client.FrontierClient` does.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

import redis

from crawlhub.frontier import keys as key_names
from crawlhub.frontier.dupefilter import ExactFilter, Filter
from crawlhub.frontier.keys import Keys
from crawlhub.frontier.records import DeadLetter, EnqueueOp, ExpiredLease, Finish, Tick, text
from crawlhub.frontier.scripts import source


def queued_per_domain(server: redis.Redis, keys: Keys) -> dict[str, int]:
    """Queued requests per domain (a read: no script)."""
    return {text(d): int(n) for d, n in server.hgetall(keys.queued).items()}


class FrontierOps:
    """The scripts, bound to one spider's keys.

    ``politeness`` is the JSON-able config of crawlhub.frontier.politeness.Politeness
    (default rate and concurrency, per-domain limits from settings, burst...);
    ``dupefilter`` turns a fingerprint into the filter's operation
    (crawlhub.frontier.dupefilter).
    """

    def __init__(self, server: redis.Redis, keys: Keys, spider: str = "", politeness: dict[str, Any] | None = None,
                 scan: int = 16, dupefilter: Filter | None = None, factor_max: float = 32.0, recovery: float = 0.8):
        self.server = server
        self.keys = keys
        self.spider = spider or keys.inflight.rsplit(":", 1)[0]
        self.politeness = politeness or {}
        self.scan = scan
        self.dupefilter: Filter = dupefilter or ExactFilter(keys.dupefilter)
        self.factor_max, self.recovery = factor_max, recovery
        k = keys
        self.ctx = {
            "spider": self.spider, "prefix": k.queue, "schedule": k.schedule, "counts": k.queued,
            "inflight": k.inflight, "leases": k.leases, "seq": k.lease_seq, "delayed": k.delayed, "dlq": k.dlq,
            "budget_used": k.budget_used, "budget": k.budget, "limits": key_names.LIMITS, "seen": k.seen,
            "paused": k.paused, "known": key_names.DOMAINS, "factor_max": factor_max, "recovery": recovery,
        }
        self._ctx_json = json.dumps(self.ctx)
        self._tick = server.register_script(source("tick"))
        self._finish = server.register_script(source("finish"))
        self._move = server.register_script(source("move"))
        self._renew = server.register_script(source("renew"))
        self._expired = server.register_script(source("expired"))
        self._refresh = server.register_script(source("refresh"))

    # -- the one call a worker makes per round -------------------------------------------------
    def tick(self, enqueues: Iterable[EnqueueOp] = (), finishes: Iterable[Finish] = (), acks: Iterable[str] = (),
             n: int = 0, worker: str = "", ttl: float = 60.0, budget: int = 0, workers: int = 1,
             held: Mapping[str, int] | None = None) -> Tick:
        """Enqueue, report finished downloads, ack, and take up to ``n`` requests, in one round trip.

        workers: live workers of the spider; held: leases this worker holds per domain (its fair
        share of each domain's slots).
        """
        args: dict[str, Any] = {
            "ctx": self.ctx, "enq": [op.to_lua(self.dupefilter.spec(op.fingerprint)) for op in enqueues],
            "fin": [f.to_lua() for f in finishes], "ack": list(acks), "n": n, "ttl": ttl, "worker": worker,
            "default_budget": budget, "conf": self.politeness or {"rate": 0}, "scan": self.scan,
            "factor_max": self.factor_max, "recovery": self.recovery}
        if workers > 1:
            args["workers"], args["held"] = workers, dict(held or {})
        return Tick.from_reply(self._tick(args=[json.dumps(args, separators=(",", ":"), ensure_ascii=False)]))

    def finish(self, done: Finish) -> float:
        """A download is over now (a slow-down): the domain's new slow-down factor."""
        return float(self._finish(args=[self._ctx_json, done.domain, done.lease_id, done.outcome, done.retry_after]))

    # -- how a lease ends elsewhere ---------------------------------------------------------------
    def requeue(self, lease_id: str, payload: bytes, priority: int) -> bool:
        """Give a lease back: first in line again in its domain's queue."""
        return self._move_to(lease_id, "queue", priority, payload)

    def delay(self, lease_id: str, payload: bytes, seconds: float) -> bool:
        return self._move_to(lease_id, "delay", seconds, payload)

    def dead_letter(self, lease_id: str, record: DeadLetter) -> bool:
        return self._move_to(lease_id, "list", 0, record.to_json())

    def push(self, payload: bytes | str, priority: int, domain: str) -> None:
        """Queue a request without the duplicate filter (a requeued dead letter)."""
        self._move(args=[self._ctx_json, "", "push", priority, payload, domain])

    def _move_to(self, lease_id: str, kind: str, number: float, member: bytes | str) -> bool:
        return bool(self._move(args=[self._ctx_json, lease_id, kind, number, member, ""]))

    def refresh(self, pages: list[dict[str, Any]]) -> list[str]:
        """Queue due pages ({fp, due, payload, priority, domain}) exactly once per due time; the fingerprints queued."""
        if not pages:
            return []
        args = {"ctx": self.ctx, "revisits": self.keys.revisits, "pages": pages}
        return [text(fp) for fp in self._refresh(args=[json.dumps(args, separators=(",", ":"), ensure_ascii=False)])]

    def renew(self, lease_ids: Iterable[str], ttl: float) -> list[str]:
        """Push the leases' deadlines forward; returns those that were gone (lost)."""
        ids = list(lease_ids)
        if not ids:
            return []
        return [text(x) for x in self._renew(keys=[self.keys.inflight], args=[ttl, self.spider, *ids])]

    def expired(self, limit: int = 100) -> list[ExpiredLease]:
        """Leases past their deadline, with their holder, when they were taken and their payload."""
        out = self._expired(keys=[self.keys.inflight, self.keys.leases], args=[limit])
        found = []
        for i in range(0, len(out), 2):
            worker, taken, payload = (out[i + 1].split(b"\t", 2) + [b"", b""])[:3] if out[i + 1] else (b"", b"0", b"")
            found.append(ExpiredLease(text(out[i]), worker.decode(errors="replace"), float(taken or 0), payload))
        return found

    # -- what is there ------------------------------------------------------------------------------
    def queued(self) -> dict[str, int]:
        """Queued requests per domain."""
        return queued_per_domain(self.server, self.keys)

    def pending(self) -> bool:
        """Anything queued or waiting to retry (cheap: two ZCARDs)."""
        pipe = self.server.pipeline(transaction=False)
        pipe.zcard(self.keys.schedule)
        pipe.zcard(self.keys.delayed)
        return any(pipe.execute())

    def counts(self) -> dict[str, int]:
        k = self.keys
        pipe = self.server.pipeline(transaction=False)
        for command, key in ((pipe.llen, k.seeds), (pipe.zcard, k.delayed), (pipe.zcard, k.inflight), (pipe.llen, k.dlq),
                             (pipe.get, k.seen)):
            command(key)
        seeds, delayed, inflight, dlq, seen = pipe.execute()
        return {"seeds": seeds, "queued": sum(self.queued().values()), "delayed": delayed, "inflight": inflight,
                "dlq": dlq, "seen": int(seen or 0)}
