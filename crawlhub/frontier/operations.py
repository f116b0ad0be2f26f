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
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any

import redis

from crawlhub.frontier.dupefilter import ExactFilter, Filter
from crawlhub.frontier.keys import Keys, PartKeys, schedule_key
from crawlhub.frontier.records import DeadLetter, EnqueueOp, ExpiredLease, Finish, Tick, text
from crawlhub.frontier.scripts import Script, source
from crawlhub.roles import LANES

# The key names a script's ctx takes from KEYS, in this order (lua/_ctx.lua reads them by position): the in-flight
# set first, the partition's anchor (a cluster client routes the call by it). The last five are the round's keys a
# tagged partition's client reads itself: untagged, all five; one grouped partition, the first four (the run-time
# limits are cluster-wide: another slot); else none. Names in KEYS spare a script decoding them: the tick's
# header decoded in 19.4 us a call with them, 15.1 without (docs/benchmarks.md).
CTX_KEYS = ("inflight", "prefix", "schedule", "counts", "leases", "seq", "delayed", "dlq", "seen", "known", "domain",
            "paused", "budget", "budget_used", "epoch", "limits")
# a lease id sent to renew with this before it: its page is over, waiting for the store; written after the lease's
# taken-at time in its record (a lease id is a number then its domain: it never starts with it)
DONE_MARK = "!"
# what else a script's ctx holds, in its JSON (ARGV[1]'s "ctx"; finish, move, renew: ARGV[1] itself)
CTX_HEAD = ("spider", "factor_max", "recovery", "lanes")


# what each count of a partition is read with: (its command, its key's field in PartKeys)
COUNT_READS = {"queued": ("hvals", "queued"), "domains": ("hvals", "queued"), "delayed": ("zcard", "delayed"),
               "inflight": ("zcard", "inflight"), "dlq": ("llen", "dlq"), "seen": ("get", "seen")}
COUNTS = ("queued", "delayed", "inflight", "dlq", "seen")
TOTALS = ("seeds", *COUNTS)  # a frontier's counts (Partitions.counts): the seeds waiting too


def queued_per_domain(server: redis.Redis, keys: Keys | PartKeys) -> dict[str, int]:
    """Queued requests per domain, over every partition (a read: no script)."""
    parts = keys.parts if isinstance(keys, Keys) else [keys]
    pipe = server.pipeline(transaction=False)
    for part in parts:
        pipe.hgetall(part.queued)
    out: dict[str, int] = {}
    for found in pipe.execute():
        for d, n in found.items():
            out[text(d)] = out.get(text(d), 0) + int(n)
    return out


class FrontierOps:
    """The scripts, bound to one partition's keys (:class:`~crawlhub.frontier.keys.PartKeys`;
    :class:`~crawlhub.frontier.partitions.Partitions` holds one per partition).

    Every call names the partition's keys in KEYS (:data:`CTX_KEYS`), its anchor first, so a Redis Cluster
    client sends it to the node that holds the partition's slot; every other key it touches is in that slot.

    ``politeness`` is the JSON-able config of crawlhub.frontier.politeness.Politeness
    (default rate and concurrency, per-domain limits from settings, burst...);
    ``dupefilter`` turns a fingerprint into the filter's operation
    (crawlhub.frontier.dupefilter).
    """

    def __init__(self, server: redis.Redis, keys: Keys | PartKeys, spider: str = "",
                 politeness: dict[str, Any] | None = None, scan: int = 16, dupefilter: Filter | None = None,
                 factor_max: float = 32.0, recovery: float = 0.8, lanes: Sequence[str] = ("",)):
        self.server = server
        self.lanes = list(lanes)  # the lanes this worker leases from ('' = the domains' own queues: crawlhub.roles)
        if isinstance(keys, Keys):
            spider = spider or keys.spider
            keys = keys.part(0)
        self.keys = keys
        self.spider = spider or keys.inflight.rsplit(":", 1)[0]
        self.politeness = politeness or {}
        self.scan = scan
        self.dupefilter: Filter = dupefilter or ExactFilter(keys.dupefilter)
        self.factor_max, self.recovery = factor_max, recovery
        k = keys
        ctx: dict[str, Any] = {
            "spider": self.spider, "prefix": k.queue, "schedule": k.schedule, "counts": k.queued,
            "inflight": k.inflight, "leases": k.leases, "seq": k.lease_seq, "delayed": k.delayed, "dlq": k.dlq,
            "seen": k.seen, "known": k.known, "domain": k.domain, "factor_max": factor_max, "recovery": recovery,
            "lanes": LANES,  # every lane of the crawl (crawlhub.roles): a domain's free slot wakes each
        }
        # untagged, the script reads pause, budget and run-time limits itself (one Redis, any key)
        ctx.update({name: value for name, value in (("paused", k.paused), ("budget", k.budget),
                                                    ("budget_used", k.budget_used), ("limits", k.limits),
                                                    ("epoch", k.epoch)) if value})
        self.ctx = ctx
        self._head = {name: ctx[name] for name in CTX_HEAD}
        self._ctx_json = json.dumps(self._head)
        names = [ctx.get(name) or "" for name in CTX_KEYS]
        while not names[-1]:
            names.pop()  # (the round's keys this partition's script does not read)
        # ('' in KEYS would be slot 0's key to a cluster client: a call across slots)
        assert names[0] == k.anchor and all(names), names
        self._keys = names
        self._tick = Script(server, source("tick"))
        self._finish = Script(server, source("finish"))
        self._move = Script(server, source("move"))
        self._renew = Script(server, source("renew"))
        self._expired = Script(server, source("expired"))
        self._refresh = Script(server, source("refresh"))

    # -- the one call a worker makes per round -------------------------------------------------
    def tick(self, enqueues: Iterable[EnqueueOp] = (), finishes: Iterable[Finish] = (), acks: Iterable[str] = (),
             n: int = 0, worker: str = "", ttl: float = 60.0, budget: int = 0, workers: int = 1,
             held: Mapping[str, int] | None = None, ahead: int = 0) -> Tick:
        """Enqueue, report finished downloads, ack, and take up to ``n`` requests, in one round trip.

        workers: live workers of the spider; held: leases this worker holds per domain (its fair
        share of each domain's slots); ahead: up to this many more, from domains with no pace and no cap
        (FRONTIER_LEASE_AHEAD).
        """
        return Tick.from_reply(self._tick(keys=self._keys, args=self.tick_args(
            enqueues, finishes, acks, n, worker, ttl, budget, workers, held, ahead=ahead)))

    def tick_args(self, enqueues: Iterable[EnqueueOp] = (), finishes: Iterable[Finish] = (), acks: Iterable[str] = (),
                  n: int = 0, worker: str = "", ttl: float = 60.0, budget: int = 0, workers: int = 1,
                  held: Mapping[str, int] | None = None,
                  limits: Mapping[str, Any] | None = None, ahead: int = 0) -> list[bytes | str]:
        """The tick script's ARGV (``limits``: run-time limits the client read, tagged partitions)."""
        conf = self.politeness or {"rate": 0}
        if limits:
            conf = {**conf, "domains": {**conf.get("domains", {}), **limits}}
        # the enqueues go as arguments after the JSON (2 each): the script decodes no JSON per link
        flat: list[Any] = []
        for op in enqueues:
            flat += op.to_argv(self.dupefilter.spec(op.fingerprint))
        acks = list(acks)
        # a download's end whose ack is in the same call is left out: the ack frees its slot (Finish.told_by_ack;
        # the end and the ack 12.7-14.8 -> 8.1-10.2 us a page, docs/benchmarks.md)
        acked = set(acks) if acks else frozenset()
        args: dict[str, Any] = {
            "ctx": self._head,
            "fin": [f.to_lua() for f in finishes if not f.told_by_ack(acked)], "ack": acks, "n": n, "ttl": ttl,
            "worker": worker, "default_budget": budget, "conf": conf, "scan": self.scan}
        if self.lanes != [""]:
            args["lanes"] = self.lanes
        if n and ahead > 0:
            args["ahead"] = ahead
        if workers > 1:
            args["workers"], args["held"] = workers, dict(held or {})
        return [json.dumps(args, separators=(",", ":"), ensure_ascii=False), *flat]

    @property
    def tick_script(self) -> Any:
        return self._tick

    @property
    def script_keys(self) -> list[str]:
        """A script call's KEYS: the partition's key names (:data:`CTX_KEYS`), its anchor first."""
        return self._keys

    def finish(self, done: Finish) -> float:
        """A download is over now (a slow-down): the domain's new slow-down factor."""
        return float(self._finish(keys=self._keys, args=[self._ctx_json, done.domain, done.lease_id, done.outcome, done.retry_after]))

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
        self._move(keys=self._keys, args=[self._ctx_json, "", "push", priority, payload, domain])

    def _move_to(self, lease_id: str, kind: str, number: float, member: bytes | str) -> bool:
        return bool(self._move(keys=self._keys, args=[self._ctx_json, lease_id, kind, number, member, ""]))

    def refresh(self, pages: list[dict[str, Any]]) -> list[str]:
        """Queue due pages ({fp, due, payload, priority, domain}) exactly once per due time; the fingerprints queued."""
        if not pages:
            return []
        args = {"ctx": self._head, "revisits": self.keys.revisits, "pages": pages}
        return [text(fp) for fp in self._refresh(keys=self._keys, args=[json.dumps(args, separators=(",", ":"), ensure_ascii=False)])]

    def renew(self, lease_ids: Iterable[str], ttl: float, done: Collection[str] = ()) -> list[str]:
        """Push the leases' deadlines forward; returns those that were gone (lost). ``done``: those of them whose
        page is over and waits for the store, marked so in the lease (ExpiredLease.done), sent as ``!id``."""
        ids = [f"{DONE_MARK}{i}" if i in done else i for i in lease_ids]
        if not ids:
            return []
        return [text(x) for x in self._renew(keys=self._keys, args=[self._ctx_json, ttl, *ids])]

    def expired(self, limit: int = 100) -> list[ExpiredLease]:
        """Leases past their deadline, with their holder, when they were taken and their payload."""
        script, keys, args = self.expired_call(limit)
        return expired_leases(script(keys=keys, args=args))

    def expired_call(self, limit: int) -> tuple[Any, list[str], list[Any]]:
        """The expired script's call, (script, keys, args): for a pipeline over partitions (run_scripts)."""
        return self._expired, [self.keys.inflight, self.keys.leases], [limit]

    # -- what is there ------------------------------------------------------------------------------
    def queued(self) -> dict[str, int]:
        """Queued requests per domain."""
        return queued_per_domain(self.server, self.keys)

    def pending(self) -> bool:
        """Anything queued for this worker's lanes or waiting to retry: one EXISTS of the lanes' schedules and the
        retries (Redis deletes a sorted set that empties: there is one while it holds a member)."""
        return bool(self.server.exists(*self.schedules(self.lanes), self.keys.delayed))

    def schedules(self, lanes: Sequence[str] = LANES) -> list[str]:
        """The schedules of ``lanes`` (crawlhub.roles): the domains' own, ``<schedule>:<lane>`` for a lane."""
        return [schedule_key(self.keys.schedule, lane) for lane in lanes]

    def counts(self, fields: Collection[str] = COUNTS) -> dict[str, int]:
        """This partition's queued, delayed, in-flight, dead-letter and seen counts (``fields``: only those)."""
        return partition_counts(self.server, [self.keys], fields)


def expired_leases(out: list[Any]) -> list[ExpiredLease]:
    """The expired script's reply: lease id, then holder, taken at (``!`` after it: marked done by a renewal,
    lua/renew.lua) and payload (tab-separated)."""
    found = []
    for i in range(0, len(out), 2):
        worker, taken, payload = (out[i + 1].split(b"\t", 2) + [b"", b""])[:3] if out[i + 1] else (b"", b"0", b"")
        done = taken.endswith(DONE_MARK.encode())
        found.append(ExpiredLease(text(out[i]), worker.decode(errors="replace"),
                                  float(taken.rstrip(DONE_MARK.encode()) or 0), payload, done))
    return found


def per_partition(server: redis.Redis, parts: list[PartKeys], fields: Collection[str] = ("domains", *COUNTS)
                  ) -> list[dict[str, int]]:
    """Each partition's domains, queued, delayed, in flight, dead letters and URLs seen (``fields``: only those,
    a command each that one needs: the counts of 48 partitions are 240 commands, the URLs seen alone 48), in one
    pipeline."""
    reads = list(dict.fromkeys(COUNT_READS[f] for f in fields))
    if not reads:
        return [{} for _ in parts]
    pipe = server.pipeline(transaction=False)
    for k in parts:
        for command, key in reads:
            getattr(pipe, command)(getattr(k, key))
    out = pipe.execute()
    rows = []
    for i in range(0, len(out), len(reads)):
        got = dict(zip(reads, out[i:i + len(reads)], strict=True))
        row = {}
        for f in fields:
            value = got[COUNT_READS[f]]  # (the queue's hash: domain -> requests queued; else a number or None)
            row[f] = len(value) if f == "domains" else sum(map(int, value)) if f == "queued" else int(value or 0)
        rows.append(row)
    return rows


def partition_counts(server: redis.Redis, parts: list[PartKeys], fields: Collection[str] = COUNTS) -> dict[str, int]:
    """Queued, delayed, in flight, dead letters and URLs seen (``fields``: only those), summed over ``parts``."""
    rows = per_partition(server, parts, fields)
    return {name: sum(r[name] for r in rows) for name in fields}
