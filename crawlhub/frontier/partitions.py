"""A spider's frontier over its partitions (FRONTIER_PARTITIONS; docs/frontier.md).

A domain belongs to one partition (:func:`crawlhub.frontier.keys.partition_of`),
with its queue, its politeness state and the duplicate-filter entries of its
URLs; a lease id names its domain, so every operation on a request or a lease
goes to one partition, and every Lua script touches the keys of that one
partition only (one Redis Cluster slot). Nothing needs two partitions at once.

One round of a worker (:meth:`Partitions.tick`) with several partitions:

1. read the hint ``<spider>:ready`` (partition -> when it may next have a
   request ready), the pause flag and the budget: one pipelined call;
2. reserve the batch against the budget (INCRBY, the unused part given back
   after the round), so that the budget is never exceeded;
3. one tick per partition touched, pipelined (a cluster client sends each
   to its node): the page's links to their own partitions, the finished
   downloads and acks to the lease's partition, and the lease spread over
   up to FRONTIER_PARTITIONS_PER_LEASE ready partitions, in random order
   so that workers do not crowd one partition;
4. write back the hint (``lua/hint.lua``, one call): each partition leased
   from is next ready when its tick says, or "empty" when it holds nothing
   (asked again after FRONTIER_PARTITION_RECHECK, a safety net); a partition
   that received links is ready now.

The hints are kept exact, so that a worker with nothing to do reads one key
(:meth:`Partitions.pending`, the lease round's first pipeline) whatever the
number of partitions: an observation is written only if the hint is still the
one the round read before its tick (compare-and-set on the score), and every
write that adds work moves the hint (``mark``), so a round that found a
partition empty cannot write "empty" over links another worker queued after
its tick. What is left: a worker killed between its tick and its hint write
(the links are queued, the mark is not): that partition is asked again within
FRONTIER_PARTITION_RECHECK. A hint delays work; it never loses it.

One partition on a plain Redis is the classic layout: one tick script call
per round, pause and budget checked inside it, no hint.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import random
import time
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import redis
from redis.cluster import RedisCluster
from scrapy.settings import BaseSettings

from crawlhub.connection import REDIS_ERRORS
from crawlhub.frontier.dupefilter import Filter, make_filters
from crawlhub.frontier.keys import Keys
from crawlhub.frontier.operations import TOTALS, FrontierOps, expired_leases, partition_counts, queued_per_domain
from crawlhub.frontier.records import DeadLetter, EnqueueOp, ExpiredLease, Finish, Tick, lease_domain, text
from crawlhub.frontier.scripts import Script, source
from crawlhub.roles import split_queue
from crawlhub.seeds import WrongSeedKey, count_seeds

if TYPE_CHECKING:
    from crawlhub.frontier.politeness import Politeness

logger = logging.getLogger(__name__)

# A hint's score is a time in whole milliseconds since the epoch (hint_ms): an integral score is stored, compared and
# sent back without formatting a double, which Redis 7.0 does with "%.17g" (a hint's ZADD 6.8 us with the seconds'
# fractions, 1.7 us whole; the round's read of every hint 35 us and 21: docs/benchmarks.md). A hint at or above
# EMPTY says its partition holds nothing queued or delayed (to be asked again at score - EMPTY); below, it is when
# the partition may next have a request ready (lua/hint.lua). (Hints of an older worker, in seconds, read as long
# past: their partitions are asked once, and hinted anew.)
EMPTY = 10**13  # (year 2286 in milliseconds: beyond any time)


def hint_ms(t: float) -> int:
    """A time (seconds since the epoch) as a hint's score."""
    return int(t * 1000)


@dataclass
class _Round:
    """What one round sends to one partition."""

    enq: list[EnqueueOp] = field(default_factory=list)
    fin: list[Finish] = field(default_factory=list)
    ack: list[str] = field(default_factory=list)
    n: int = 0


class DuplicateShare:
    """The share of a worker's links (past its local filter) that the shared filter already holds, and
    whether reading the filter before a round pays: a SISMEMBER costs Redis about 1 us a link and the read
    a round trip; a duplicate sent into the tick script costs about 3 us more than a new link. Reading
    pays above about a third; below ``READ_FROM`` the links go straight to the round. Learnt from every
    round (the read's answers, or the script's count of new links), weighted by the links seen."""

    READ_FROM = 0.3
    MEMORY = 256  # links: the weight of what was learnt before
    PRIOR = 16

    def __init__(self) -> None:
        self.share = 0.5  # a new worker reads first until it knows better (a prior worth PRIOR links)
        self.weight = self.PRIOR

    def learn(self, duplicates: int, n: int) -> None:
        """``duplicates`` of ``n`` links the filter could be read for were in it already."""
        if n <= 0:
            return
        seen = min(1.0, max(0.0, duplicates / n))
        total = min(self.weight, self.MEMORY) + n
        self.share = (self.share * min(self.weight, self.MEMORY) + seen * n) / total
        self.weight = total

    def worth_reading(self) -> bool:
        return self.share >= self.READ_FROM


@dataclass
class RoundResult:
    """A round over several partitions: the merged Tick, and what could not be sent (Redis, or a node, down)."""

    tick: Tick
    unsent_enq: list[EnqueueOp] = field(default_factory=list)
    unsent_fin: list[Finish] = field(default_factory=list)
    unsent_ack: list[str] = field(default_factory=list)
    deferred_ack: list[str] = field(default_factory=list)  # held for the next round: see Partitions.tick
    held_sent: int = 0  # links this round sent that an earlier round held (FRONTIER_LINK_HOLD)
    failed: int = 0  # partitions whose call failed
    error: BaseException | None = None


def run_scripts(server: redis.Redis, calls: list[tuple[Any, list[str], list[Any]]],
                wait: tuple[int, int, list[str]] | None = None, extra: Sequence[tuple[Any, ...]] = ()) -> list[Any]:
    """Run script calls (script, keys, args) in one pipeline; a cluster client sends each to its node.

    ``extra``: plain commands sent in the same pipeline, after the calls (their replies are not returned).

    ``wait``: (replicas, timeout ms, anchor keys): after the calls, WAIT on the node of each anchor
    (on the connection that wrote, so it covers those writes) until that many replicas have them.
    Returns each call's reply, or the exception it raised (a node down). A node that does not know
    a script (a promoted replica, a restarted server) gets it loaded and the call is sent again.
    """
    pipe = server.pipeline(transaction=False)
    for script, keys, args in calls:
        # EVALSHA by name: redis-py's cluster pipeline refuses its script helper, not the command
        pipe.execute_command("EVALSHA", script.sha, len(keys), *keys, *args)  # type: ignore[no-untyped-call]
    for command in extra:
        pipe.execute_command(*command)  # type: ignore[no-untyped-call]
    if wait:
        replicas, timeout_ms, anchors = wait
        if isinstance(server, RedisCluster):
            nodes = {server.get_node_from_key(k).name: server.get_node_from_key(k) for k in anchors}
            for node in nodes.values():
                pipe.execute_command("WAIT", replicas, timeout_ms, target_nodes=node)
        else:
            pipe.execute_command("WAIT", replicas, timeout_ms)  # type: ignore[no-untyped-call]
    try:
        replies = pipe.execute(raise_on_error=False)[:len(calls)]
    except REDIS_ERRORS as exc:
        if len(calls) == 1 or not isinstance(server, RedisCluster):
            return [exc] * len(calls)
        # one node is down (a failover under way): the partitions on the others go on, one call each
        replies = []
        for script, keys, args in calls:
            try:
                replies.append(script(keys=keys, args=args))
            except REDIS_ERRORS as err:
                replies.append(err)
        return replies
    for i, reply in enumerate(replies):
        if isinstance(reply, redis.exceptions.NoScriptError):
            script, keys, args = calls[i]
            try:
                replies[i] = script(keys=keys, args=args)  # EVALSHA again (an earlier retry may have loaded it), loaded if not
            except REDIS_ERRORS as exc:
                replies[i] = exc
    return list(replies)


class Partitions:
    """The scripts of every partition of one spider's frontier, and the operations that span them."""

    def __init__(self, server: redis.Redis, keys: Keys, politeness: dict[str, Any] | None = None, scan: int = 16,
                 filters: list[Filter] | None = None, factor_max: float = 32.0, recovery: float = 0.8,
                 per_lease: int = 4, recheck: float = 1.0, replica_wait: int = 0, replica_wait_ms: int = 100,
                 lanes: Sequence[str] = ("",), link_hold: float = 0.0, link_batch: int = 32, per_call: int = 1):
        self.server, self.keys = server, keys
        # links for a partition the round does not call anyway wait in the worker (with every ack: a page ends
        # only when its links are queued) until link_batch are pending there, for at most link_hold seconds, or
        # until the worker runs short of work (FRONTIER_LINK_HOLD, FRONTIER_LINK_BATCH): each partition's call
        # costs its master a few hundred microseconds beside its links. A reset drops them (the epoch moved);
        # a worker killed loses them with its unacked pages, which are leased again.
        self.link_hold, self.link_batch = link_hold, max(1, link_batch)
        self._held_enq: list[EnqueueOp] = []
        self._held_ack: list[str] = []
        self._held_since = 0.0
        self._busy = False  # the last lease round got all it asked for (else: hold nothing)
        # partition -> the requests it had ready for this worker's last call that leased from it (absent: more than it
        # was asked, or never asked): a guess corrected by each call that leases from it (_asks)
        self._gave: dict[int, int] = {}
        self._drain = False  # a closing worker: every round sends all
        self._epoch: str | None = None  # the epoch the last lease round read
        self._holding: str | None = None  # this round's budget reservation (a member of budget_held)
        self.replica_wait, self.replica_wait_ms = replica_wait, replica_wait_ms
        self.per_lease, self.per_call, self.recheck = max(1, per_lease), max(0, per_call), recheck
        # on a Redis Cluster a busy round still picks its partitions at random: a worker keeping to the partitions
        # it calls anyway saves calls, but a few workers would then load the masters of their few partitions only
        self.spread = isinstance(server, RedisCluster)
        self.ops = [FrontierOps(server, keys.part(p), keys.spider, politeness, scan,
                                filters[p] if filters else None, factor_max, recovery, lanes)
                    for p in range(keys.partitions)]
        self.limits: dict[str, Any] = {}  # run-time limits (tagged: read by the client, sent in each tick)
        self.duplicates = DuplicateShare()  # whether a round reads the filter first (unknown)
        # partitions whose ready work a round of this worker found to be all in lanes it does not take (crawlhub.roles:
        # the hint counts every lane) -> until when they are asked after the others; a worker-local guess that
        # expires after FRONTIER_PARTITION_RECHECK (work of its own lanes queued there meanwhile waits that long)
        self.not_mine: dict[int, float] = {}
        self._hint = Script(server, source("hint"))
        self._probe = Script(server, source("probe"))

    def set_lanes(self, lanes: Sequence[str]) -> None:
        """The lanes this worker leases from from now on (crawlhub.roles: they change as workers come and go)."""
        for ops in self.ops:
            ops.lanes = list(lanes)

    @classmethod
    def from_settings(cls, server: redis.Redis, settings: BaseSettings, keys: Keys, politeness: Politeness,
                      lanes: Sequence[str] = ("",)) -> Partitions:
        return cls(
            server, keys, politeness.config(), settings.getint("FRONTIER_DOMAINS_PER_LEASE"),
            filters=make_filters(server, settings, keys),
            factor_max=politeness.factor_max, recovery=politeness.recovery,
            per_lease=settings.getint("FRONTIER_PARTITIONS_PER_LEASE", 4),
            per_call=settings.getint("FRONTIER_LEASES_PER_PARTITION", 0),
            recheck=settings.getfloat("FRONTIER_PARTITION_RECHECK", 1.0),
            replica_wait=settings.getint("FRONTIER_REPLICA_WAIT", 0),
            replica_wait_ms=settings.getint("FRONTIER_REPLICA_WAIT_TIMEOUT", 100),
            lanes=lanes,
            link_hold=settings.getfloat("FRONTIER_LINK_HOLD", 1.0),
            link_batch=settings.getint("FRONTIER_LINK_BATCH", 32),
        )

    @property
    def holding(self) -> bool:
        """Links or acks wait in this worker for a later round (FRONTIER_LINK_HOLD): writes still to send."""
        return bool(self._held_enq or self._held_ack)

    def drain(self) -> None:
        """From now on every round sends everything held (a worker closing)."""
        self._drain = True

    def set_aside(self, payload: bytes, reason: str, most: int) -> None:
        """Keep an undecodable payload in <spider>:bad_requests, with why (it is never executed)."""
        logger.warning("Refused a request payload from %s (%s); set aside in %s", self.keys.queue_key, reason,
                       self.keys.bad_requests)
        record = json.dumps({"reason": reason, "payload": payload[:4096].decode("utf-8", "backslashreplace"),
                             "queue": self.keys.queue_key, "at": time.time()})
        with self.server.pipeline() as pipe:
            pipe.lpush(self.keys.bad_requests, record)
            pipe.ltrim(self.keys.bad_requests, 0, most - 1)
            pipe.execute()

    @property
    def count(self) -> int:
        return len(self.ops)

    @property
    def single(self) -> bool:
        """One script call per round (Keys.one_call): the classic layout (one untagged partition), or one grouped
        partition (a Redis Cluster's default); the script checks pause, budget and the epoch itself."""
        return self.keys.one_call

    def of(self, domain: str) -> FrontierOps:
        return self.ops[self.keys.partition_of(domain)]

    def of_lease(self, lease_id: str) -> FrontierOps:
        return self.of(lease_domain(lease_id))

    # -- one round ------------------------------------------------------------------------------------
    def tick(self, enqueues: Iterable[EnqueueOp] = (), finishes: Iterable[Finish] = (), acks: Iterable[str] = (),
             n: int = 0, worker: str = "", ttl: float = 60.0, budget: int = 0, workers: int = 1,
             held: Mapping[str, int] | None = None, safe_acks: Iterable[str] = (), ahead: int = 0) -> RoundResult:
        """One round. ``acks``: leases done since the last round; ``safe_acks``: leases whose pages' links
        a previous round queued (they end now, in any order).

        A page's links are queued before its lease ends (invariant 2). In one partition that is one
        script; across partitions the calls of a round run in parallel, so an ack whose page may have
        links in another partition this round is held for the next round (``deferred_ack``), when
        those links are known to be queued, and, with FRONTIER_REPLICA_WAIT, on a replica too.
        """
        ops = list(enqueues)
        checks = self._checkable(ops)
        sent = self._read_first(ops, checks)
        result = self._round(sent, finishes, acks, n, worker, ttl, budget, workers, held, safe_acks, ahead)
        if sent is ops and checks and not result.failed and not self._held_enq and not result.held_sent:
            # not read first, all sent with this round: the script's count of new links tells
            self.duplicates.learn(len(ops) - result.tick.added, len(checks))
        return result

    def _round(self, enqueues: list[EnqueueOp], finishes: Iterable[Finish], acks: Iterable[str], n: int, worker: str,
               ttl: float, budget: int, workers: int, held: Mapping[str, int] | None,
               safe_acks: Iterable[str], ahead: int = 0) -> RoundResult:
        if self.single and not self.keys.tagged:
            return RoundResult(self.ops[0].tick(enqueues, finishes, [*safe_acks, *acks], n, worker, ttl, budget,
                                                workers, held, ahead=ahead))
        if self.single:  # one grouped partition: its script, with the run-time limits the client read (cluster-wide)
            ops = self.ops[0]
            wait_for = (self.replica_wait, self.replica_wait_ms, [ops.keys.anchor]) if self.replica_wait and enqueues \
                else None
            (reply,) = run_scripts(self.server, [(ops.tick_script, ops.script_keys, ops.tick_args(
                enqueues, finishes, [*safe_acks, *acks], n, worker, ttl, budget, workers, held, self.limits,
                ahead=ahead))], wait_for)
            if isinstance(reply, BaseException):
                raise reply
            return RoundResult(Tick.from_reply(reply))
        prior_enq, prior_ack = self._held_enq, self._held_ack
        self._held_enq, self._held_ack = [], []
        try:
            return self._parts_round(enqueues, finishes, acks, n, worker, ttl, budget, workers, held, safe_acks,
                                     ahead, prior_enq, prior_ack)
        except BaseException:
            # the caller keeps what it passed; what this worker held before the round is held again; its budget
            # reservation is dropped (else it lapses with the lease TTL)
            self._held_enq, self._held_ack = prior_enq, prior_ack
            reservation, self._holding = self._holding, None
            if reservation is not None:
                with contextlib.suppress(*REDIS_ERRORS):
                    self.server.zrem(self.keys.budget_held, reservation)
            raise

    def _parts_round(self, enqueues: list[EnqueueOp], finishes: Iterable[Finish], acks: Iterable[str], n: int,
                     worker: str, ttl: float, budget: int, workers: int, held: Mapping[str, int] | None,
                     safe_acks: Iterable[str], ahead: int, prior_enq: list[EnqueueOp],
                     prior_ack: list[str]) -> RoundResult:
        rounds: dict[int, _Round] = {}
        mine = self.ops[0].lanes
        enqueues, elsewhere = self._lease_elsewhere(enqueues)
        acks = [*acks, *elsewhere]  # (ended once the requests replacing them are queued: see below)
        links = self._by_partition([*prior_enq, *enqueues])  # to send or hold, those held before first
        for op in enqueues:
            p = self.keys.partition_of(op.domain)
            if self.not_mine and split_queue(op.domain)[1] in mine:
                self.not_mine.pop(p, None)  # this worker's own links went there: work for it
        for done in finishes:
            rounds.setdefault(self.keys.partition_of(done.domain), _Round()).fin.append(done)
        for lease_id in safe_acks:
            rounds.setdefault(self.keys.partition_of(lease_domain(lease_id)), _Round()).ack.append(lease_id)
        status, reserved, counted, wait, epoch = "ok", 0, False, None, None
        ahead_share = 0
        unknown: list[int] = []
        chosen: list[int] = []
        read: dict[int, float] = {}  # the hints this round read before its ticks (absent: none)
        if n > 0:
            status, reserved, counted, ready, wait, epoch, read, unknown = self._prepare(n, budget, set(links), ttl)
            if self._epoch is not None and epoch != self._epoch and (prior_enq or prior_ack):
                # a reset (or a frontier gone) since they were held: they belong to the crawl that ended
                logger.warning("The frontier's epoch moved: %d links and %d acks held for later rounds dropped",
                               len(prior_enq), len(prior_ack))
                links, prior_enq, prior_ack = self._by_partition(enqueues), [], []
            if epoch != self._epoch:
                self._gave.clear()  # (what partitions had ready: of the crawl before a reset)
            self._epoch = epoch
            if self._busy and not self.spread:
                # one server: the partitions the round calls anyway (finished downloads) first, then those with links
                ready.sort(key=lambda p: (p in self.not_mine, p not in rounds, p not in links))
            for p, ask in self._asks(ready, reserved).items():  # (none: a budget's rest is reserved by others)
                rounds.setdefault(p, _Round()).n = ask
                chosen.append(p)
            # leased ahead (no budget counted: a budget's reservation is exact), shared as n is
            ahead_share = math.ceil(ahead / len(chosen)) if chosen and not counted else 0
        wait_more = self._holds(links, set(rounds), n, status, chosen, ttl)
        held_sent, was_held = 0, {id(op) for op in prior_enq}
        for p, part_links in links.items():
            if p in wait_more:
                self._held_enq += part_links
            else:
                rounds.setdefault(p, _Round()).enq += part_links
                held_sent += sum(id(op) in was_held for op in part_links)
        linked = {p for p, r in rounds.items() if r.enq}  # partitions that get links this round
        deferred: list[str] = []
        if self._held_enq:  # links wait: every ack with them (a page ends when its links are queued)
            self._held_ack = [*prior_ack, *acks]
        else:
            for lease_id in [*prior_ack, *acks]:
                p = self.keys.partition_of(lease_domain(lease_id))
                if linked - {p}:
                    deferred.append(lease_id)
                else:
                    rounds.setdefault(p, _Round()).ack.append(lease_id)
        self._held_since = (self._held_since or time.monotonic()) if self._held_enq else 0.0
        order = sorted(rounds)
        calls = []
        for p in order:
            r, ops = rounds[p], self.ops[p]
            calls.append((ops.tick_script, ops.script_keys, ops.tick_args(
                r.enq, r.fin, r.ack, r.n, worker, ttl, 0, workers, held if r.n else None, self.limits,
                ahead=ahead_share)))
        wait_for = None
        if self.replica_wait and linked:
            wait_for = (self.replica_wait, self.replica_wait_ms, [self.ops[p].keys.anchor for p in sorted(linked)])
        # the partitions that get links are marked first, in the same pipeline (and again after: _after): a round
        # that reads their hint before these links land and finds them empty cannot hide the links, even if
        # this worker dies before its second write
        now = time.time()
        now_ms = hint_ms(now)
        marks: list[tuple[int, float | None, float, str]] = [(p, None, now_ms, "mark") for p in order if rounds[p].enq]
        pre = [(self._hint, [self.keys.ready], self._hint_args(marks))] if marks else []
        due = [p for p in read if read[p] >= EMPTY][:self.per_lease] + unknown
        probes: list[tuple[Any, list[str], list[Any]]] = [
            (self._probe, [*self.ops[p].schedules(), self.ops[p].keys.delayed], []) for p in due]
        replies = run_scripts(self.server, pre + calls + probes, wait_for)[len(pre):] if calls or probes else []
        replies, probed = replies[:len(calls)], replies[len(calls):]
        merged = Tick([], None, budget_exhausted=status == "budget", paused=status == "paused", epoch=epoch)
        merged.waiting = True if wait is not None else None  # a hint says work is queued or delayed, not ready
        result = RoundResult(merged, deferred_ack=deferred, held_sent=held_sent)
        hints: list[tuple[int, float | None, float, str]] = []  # (partition, the hint read, the new one, mode)
        for p, reply in zip(order, replies, strict=True):
            r = rounds[p]
            if isinstance(reply, BaseException):
                result.unsent_enq += r.enq
                result.unsent_fin += r.fin
                result.unsent_ack += r.ack
                result.failed += 1
                result.error = reply
                continue
            got = Tick.from_reply(reply)
            merged.taken += got.taken
            merged.added += got.added
            merged.acked += got.acked
            if got.wait is not None:
                merged.wait = got.wait if merged.wait is None else min(merged.wait, got.wait)
                merged.waiting = True  # seen in a partition it asked (else: it cannot tell)
            if r.n and not got.taken and got.wait is None and got.any_wait is not None:
                self.not_mine[p] = now + self.recheck  # work there, none of it in this worker's lanes
            if r.n:
                # what it gave, against what it was asked: what the next busy round asks of it (_asks)
                if len(got.taken) >= r.n and got.wait == 0:
                    self._gave.pop(p, None)  # all it was asked, and more is ready there
                else:  # all it had ready (at least 1: a partition that gave none, ready again by its hint, is asked)
                    self._gave[p] = max(1, len(got.taken))
                # what the tick saw: ready then, or empty (asked again after a jittered recheck)
                # (any lane's: a worker never hints "empty" over work of a lane it does not take)
                seen = hint_ms(now + got.any_wait) if got.any_wait is not None else self._empty_hint(now)
                # (read as ready, and ready still, with no links of this round there: the hint says so already, and
                # a busy round writes nothing; links: written, to lower a hint another round may have moved)
                if got.added or read.get(p, EMPTY) >= EMPTY or seen > now_ms:
                    hints.append((p, read.get(p), seen, "add" if got.added else "set"))
            elif got.added:
                hints.append((p, None, now_ms, "mark"))
        for p, reply in zip(due, probed, strict=True):
            if not isinstance(reply, BaseException):
                hints.append((p, read.get(p), now_ms if int(reply) else self._empty_hint(now), "set"))
                if int(reply) and merged.wait is None:  # work found where none was hinted: ask again at once
                    merged.wait, merged.waiting = 0.0, True
        if merged.wait is None and wait is not None:
            merged.wait = wait
        if calls and result.failed == len(calls):
            raise result.error if isinstance(result.error, REDIS_ERRORS) else redis.ConnectionError(str(result.error))
        # (under a budget: what was taken is counted, and the reservation dropped)
        self._after(hints, len(merged.taken))
        if n > 0:
            self._busy = status == "ok" and len(merged.taken) >= n
        return result

    def _asks(self, ready: list[int], reserved: int) -> dict[int, int]:
        """The partitions a lease round asks, in ``ready``'s order, and what it asks of each. Each call costs its master
        a few hundred microseconds beside its leases, so while rounds get all they ask (busy) a round asks few:
        with per_call 0, each partition for what it had ready last time, until one is asked for all the round still
        wants (one that had more than it was asked, or never asked, or the last), per_lease partitions at most; with
        per_call N > 1, one partition per N requests. Short of work (or with per_call 1), per_lease partitions share
        the round's requests. (``_gave``: this worker's guess, corrected by each call that leases from the
        partition.)"""
        if not reserved or not ready:
            return {}
        if self._busy and self.per_call == 0:
            asks: dict[int, int] = {}
            left = reserved
            for i, p in enumerate(ready[:self.per_lease]):
                gave = self._gave.get(p)
                if gave is None or gave >= left or i == min(self.per_lease, len(ready)) - 1:
                    asks[p] = left
                    break
                asks[p] = gave
                left -= gave
            return asks
        wanted = min(self.per_lease, math.ceil(reserved / self.per_call)) if self._busy else self.per_lease
        chosen = ready[:max(1, wanted)]
        share = math.ceil(reserved / len(chosen))
        return {p: min(share, reserved - share * i) for i, p in enumerate(chosen) if reserved > share * i}

    def _lease_elsewhere(self, ops: list[EnqueueOp]) -> tuple[list[EnqueueOp], list[str]]:
        """A request that replaces a lease of another partition (a redirect to a domain there) cannot end that lease
        in its own partition's call: it goes marked ('^' before the lease id: first out of its queue, nothing to
        end there), and the lease is acked in its partition, in a round after the one that queues the request
        (an ack with links in another partition waits for them). Before, the lease stayed in flight until it
        expired, and its page was fetched again."""
        if not any(op.ends_lease for op in ops):
            return ops, []
        out, elsewhere = [], []
        for op in ops:
            lease = op.ends_lease
            if lease and not lease.startswith("^") and \
                    self.keys.partition_of(lease_domain(lease)) != self.keys.partition_of(op.domain):
                op = op._replace(ends_lease="^" + lease)
                elsewhere.append(lease)
            out.append(op)
        return out, elsewhere

    def _by_partition(self, ops: Iterable[EnqueueOp]) -> dict[int, list[EnqueueOp]]:
        links: dict[int, list[EnqueueOp]] = {}
        for op in ops:
            links.setdefault(self.keys.partition_of(op.domain), []).append(op)
        return links

    def _holds(self, links: dict[int, list[EnqueueOp]], called: set[int], n: int, status: str,
               chosen: list[int], ttl: float) -> set[int]:
        """The partitions whose links wait for a later round (FRONTIER_LINK_HOLD): none while the worker runs short of
        work (its last lease round got less than it asked, this one finds nothing ready, a pause, a budget), once
        the oldest waited link_hold seconds (at most a quarter of the lease TTL: the held acks' leases are not
        renewed), or when it closes; else those the round does not call anyway (to lease, for finished downloads or
        acks) with fewer than link_batch links, and no link that ends a lease."""
        if self.link_hold <= 0 or self._drain or not self._busy or status != "ok" or (n > 0 and not chosen):
            return set()
        if self._held_since and time.monotonic() - self._held_since >= min(self.link_hold, ttl / 4):
            return set()
        return {p for p, part_links in links.items() if p not in called and len(part_links) < self.link_batch
                and not any(op.ends_lease or op.force for op in part_links)}

    def _checkable(self, ops: list[EnqueueOp]) -> list[tuple[int, list[Any]]]:
        """The enqueues the exact filter's sets can be read for: (index, the filter's spec). Forced requests,
        requests that replace a lease and the Bloom filters' links always go."""
        return [(i, spec) for i, op in enumerate(ops) if not op.force and not op.ends_lease
                for spec in [self.of(op.domain).dupefilter.spec(op.fingerprint)] if spec[0] == "s"]

    def unknown(self, enqueues: Iterable[EnqueueOp]) -> list[EnqueueOp]:
        """The enqueues the shared filter may not have yet: the exact filter's sets are read first (one
        pipelined SISMEMBER per link, no script), and a link they hold is not sent with the round (most
        links are duplicates: the read costs Redis a third of a duplicate's trip through the tick script,
        and its payload never travels). Only a read: the script still decides, atomically, for the rest.
        Forced requests, requests that replace a lease and the Bloom filters' links always go.

        Read only while it pays (:class:`DuplicateShare`): when few of the links are duplicates (a site
        with no menu, the worker's local filter catching the repeats) the read is a round trip and a
        command per link for nothing, and the links go straight to the round, whose count of new links
        keeps the estimate current."""
        ops = list(enqueues)
        return self._read_first(ops, self._checkable(ops))

    def _read_first(self, ops: list[EnqueueOp], checks: list[tuple[int, list[Any]]]) -> list[EnqueueOp]:
        """:meth:`unknown` of ``ops`` (``checks``: their :meth:`_checkable`); ``ops`` itself when nothing was read."""
        if len(checks) < 2 or not self.duplicates.worth_reading():
            return ops
        pipe = self.server.pipeline(transaction=False)
        for _, spec in checks:
            pipe.sismember(spec[1], spec[2])
        found = {i for (i, _), present in zip(checks, pipe.execute(), strict=True) if present}
        self.duplicates.learn(len(found), len(checks))
        return [op for i, op in enumerate(ops) if i not in found]

    def _prepare(self, n: int, budget: int, linked: set[int] | None = None, ttl: float = 60.0) -> tuple[
            str, int, bool, list[int], float | None, str, dict[int, float], list[int]]:
        """Pause, budget, the ready partitions and the frontier's epoch: (status, requests to lease, whether under a
        budget (reserved: :meth:`_reserve`), partitions, wait if none is ready, epoch ("" = gone),
        the hints read: partition -> score, the partitions with no hint). ``linked``: the partitions this round
        queues links in, ready too (their tick queues the links before it leases). One pipeline, whatever the
        number of partitions (and one more read when some have no hint): five commands where one node holds these
        keys (one MGET of the epoch, the pause and the budget), eight else. (In a script they cost Redis more, not
        less: 77 us a call in a crawl against some 17 us for the eight commands, docs/benchmarks.md.)"""
        k = self.keys
        now = time.time()
        now_ms = hint_ms(now)
        pipe = self.server.pipeline(transaction=False)
        one_node = k.grouped or not self.spread
        if one_node:  # one MGET (the pause's value is its time, a string)
            # (by name: redis-py's cluster pipeline refuses its mget method, not the command)
            pipe.execute_command("MGET", k.epoch, k.paused, k.budget, k.budget_used)  # type: ignore[no-untyped-call]
        else:
            pipe.get(k.epoch)
            pipe.exists(k.paused)
            pipe.get(k.budget)
            pipe.get(k.budget_used)
        pipe.zrangebyscore(k.ready, "-inf", now_ms, start=0, num=max(64, self.per_lease * 4), withscores=True)
        # partitions found empty whose recheck is due (the safety net): probed with this round, not leased from
        pipe.zrangebyscore(k.ready, EMPTY, EMPTY + now_ms, start=0, num=self.per_lease, withscores=True)
        pipe.zrange(k.ready, 0, 0, withscores=True)
        pipe.zcard(k.ready)
        *flags, ready_raw, due_raw, first, hinted = pipe.execute()
        epoch_raw, paused, stored, used_before = flags[0] if one_node else flags
        if one_node:
            paused = paused is not None
        epoch = text(epoch_raw) if epoch_raw is not None else ""
        if paused:
            return "paused", 0, False, [], None, epoch, {}, []
        read = {int(text(m)): float(v) for m, v in [*ready_raw, *due_raw] if text(m).isdigit() and int(text(m)) < self.count}
        ready = [p for p in read if read[p] < EMPTY]
        random.shuffle(ready)  # workers spread over the ready partitions instead of crowding one
        if self.not_mine:  # ready with other lanes' work only, as this worker last saw them: asked last
            self.not_mine = {p: until for p, until in self.not_mine.items() if until > now}
            ready.sort(key=lambda p: p in self.not_mine)
        unknown: list[int] = []
        if int(hinted) < self.count:
            # a new frontier, or a hint lost in a failover: partitions never hinted are probed with this round (a
            # small script each, all at once) and hinted from what they hold, not leased from: a lease round's tick
            # costs a master a few hundred microseconds even when it finds nothing, and would take a share of n
            # from the partitions that have work
            hinted_now: list[bytes] = self.server.zrange(k.ready, 0, -1)  # type: ignore[assignment]
            known = {int(text(p)) for p in hinted_now if text(p).isdigit()}
            unknown = [p for p in range(self.count) if p not in known and p not in (linked or ())]
        ready += sorted(p for p in linked or () if p not in ready)
        # no partition is ready: the first hint says when one may be (an empty partition's recheck is not work)
        wait = max(0.0, (float(first[0][1]) - now_ms) / 1000) if first and float(first[0][1]) < EMPTY else None
        limit = int(stored) if stored is not None else budget
        if limit <= 0:  # no budget: nothing is counted (a budget set later counts from then on)
            return "ok", n if ready else 0, False, ready, wait, epoch, read, unknown
        if not ready or int(used_before or 0) >= limit:  # used up: said even with nothing ready, as a tick says it
            return ("budget" if int(used_before or 0) >= limit else "ok"), 0, False, ready, wait, epoch, read, unknown
        status, allowed = self._reserve(n, limit, ttl, now)
        return status, allowed, True, ready, wait, epoch, read, unknown

    def _in_order(self, commands: Sequence[tuple[Any, ...]]) -> list[Any]:
        """Run ``commands`` so that each runs on its server after the one before it has: one pipeline when the
        budget's keys are on one server (grouped, or a plain Redis), else one call each (a cluster pipeline
        sends to its nodes in parallel)."""
        if self.keys.grouped or not self.spread:
            pipe = self.server.pipeline(transaction=False)
            for command in commands:
                pipe.execute_command(*command)  # type: ignore[no-untyped-call]
            return list(pipe.execute())
        return [self.server.execute_command(*command) for command in commands]  # type: ignore[no-untyped-call]

    def _reserve(self, n: int, limit: int, ttl: float, now: float) -> tuple[str, int]:
        """Reserve up to ``n`` requests of the budget for this round: ("budget", 0) when the requests counted in
        budget_used reach ``limit``, else ("ok", what the others' reservations leave, 0 included: they may give it
        back). The reservation is a member of budget_held until the round counts what it took (:meth:`_after`).

        Written first, read after: a round that counts its requests (INCRBY budget_used) before it drops its
        reservation is seen by every other round, in one or the other; two rounds that reserve at once see at
        least one of them the other's. So the budget is never exceeded, and "used up" is never said for a budget
        that other rounds have only reserved (before: one INCRBY counter, and a worker that found it over the
        limit while another round held the rest closed as budget_exhausted after one page of ten)."""
        k = self.keys
        token = f"{n}\t{os.urandom(6).hex()}"
        _, _, holds, used_raw = self._in_order([
            ("ZADD", k.budget_held, repr(now + ttl), token),
            ("ZREMRANGEBYSCORE", k.budget_held, "-inf", repr(now)),  # lapsed: their rounds never ended
            ("ZRANGE", k.budget_held, 0, -1),
            ("GET", k.budget_used)])
        used = int(used_raw or 0)
        held = sum(int(text(m).split("\t")[0]) for m in holds if text(m) != token)
        allowed = max(0, min(n, limit - used - held))
        if used >= limit or not allowed:
            self.server.zrem(k.budget_held, token)
            return ("budget" if used >= limit else "ok"), 0
        if allowed < n:  # hold what this round may take, not what it asked
            kept = f"{allowed}\t{token.split(chr(9))[1]}"
            self._in_order([("ZADD", k.budget_held, repr(now + ttl), kept), ("ZREM", k.budget_held, token)])
            token = kept
        self._holding = token
        return "ok", allowed

    def _after(self, hints: list[tuple[int, float | None, float, str]], taken: int) -> None:
        """Write the round's hints; under a budget, count the requests it took and drop its reservation, in
        this order (:meth:`_reserve`)."""
        held, self._holding = self._holding, None
        count = [("INCRBY", self.keys.budget_used, taken)] if held is not None and taken > 0 else []
        drop = [("ZREM", self.keys.budget_held, held)] if held is not None else []
        if not (hints or held is not None):
            return
        calls = [(self._hint, [self.keys.ready], self._hint_args(hints))] if hints else []
        # a hint lost: its partition asked again within FRONTIER_PARTITION_RECHECK. The budget: not counted, the
        # requests taken may be taken again (at most one round's), and the reservation lapses with the lease TTL
        with contextlib.suppress(*REDIS_ERRORS):
            if not drop or self.keys.grouped or not self.spread:
                run_scripts(self.server, calls, extra=[*count, *drop])
            else:
                run_scripts(self.server, calls)
                self._in_order([*count, *drop])

    def _empty_hint(self, now: float) -> int:
        """The hint of a partition found empty: asked again after FRONTIER_PARTITION_RECHECK, jittered so that the
        partitions' rechecks spread out."""
        return EMPTY + hint_ms(now + self.recheck * random.uniform(0.5, 1.5))

    @staticmethod
    def _hint_args(hints: list[tuple[int, float | None, float, str]]) -> list[str]:
        """lua/hint.lua's ARGV: (partition, the hint read (None: none), the new one, mode) each."""
        args: list[str] = []
        for p, expected, score, mode in hints:
            args += [str(p), "" if expected is None else repr(expected), repr(score), mode]
        return args

    def mark_ready(self, domain: str, at: float | None = None) -> None:
        """A request was queued without a tick (a requeued dead letter, the refresher, a retry due ``at``):
        its partition has work then, or earlier (an earlier hint stays, moved a hair so that a round that
        read it cannot write "empty" over this work; a missing one is added)."""
        if not self.single:
            self._hint(keys=[self.keys.ready],
                       args=[str(self.keys.partition_of(domain)), "", str(hint_ms(at or time.time())), "mark"])

    # -- operations routed to one partition ----------------------------------------------------------
    def finish(self, done: Finish) -> float:
        return self.of(done.domain).finish(done)

    def requeue(self, lease_id: str, payload: bytes, priority: int) -> bool:
        moved = self.of_lease(lease_id).requeue(lease_id, payload, priority)
        if moved:
            self.mark_ready(lease_domain(lease_id))
        return moved

    def delay(self, lease_id: str, payload: bytes, seconds: float) -> bool:
        moved = self.of_lease(lease_id).delay(lease_id, payload, seconds)
        if moved:
            self.mark_ready(lease_domain(lease_id), time.time() + seconds)
        return moved

    def dead_letter(self, lease_id: str, record: DeadLetter) -> bool:
        return self.of_lease(lease_id).dead_letter(lease_id, record)

    def push(self, payload: bytes | str, priority: int, domain: str) -> None:
        self.of(domain).push(payload, priority, domain)
        self.mark_ready(domain)

    def refresh(self, pages: list[dict[str, Any]]) -> list[str]:
        by_part: dict[int, list[dict[str, Any]]] = {}
        for page in pages:
            by_part.setdefault(self.keys.partition_of(page["domain"]), []).append(page)
        queued: list[str] = []
        for p, group in sorted(by_part.items()):
            moved = self.ops[p].refresh(group)
            if moved:
                self.mark_ready(group[0]["domain"])
            queued += moved
        return queued

    def renew(self, lease_ids: Iterable[str], ttl: float, done: Collection[str] = ()) -> list[str]:
        by_part: dict[int, list[str]] = {}
        for lease_id in lease_ids:
            by_part.setdefault(self.keys.partition_of(lease_domain(lease_id)), []).append(lease_id)
        lost: list[str] = []
        error: Exception | None = None
        for p, ids in sorted(by_part.items()):
            try:
                lost += self.ops[p].renew(ids, ttl, done)
            except REDIS_ERRORS as exc:  # that partition's node is down: the others are renewed all the same
                error = exc
        if error is not None and len(by_part) == 1:
            raise error
        return lost

    def expired(self, limit: int = 100, share: float = 1.0, turn: int = 0) -> list[ExpiredLease]:
        """Expired leases, at most ``limit``, in a ``share`` of the partitions: the ``turn``-th window of them (the
        reclaim looks at every partition once per LEASE_TTL, not at each of them every few seconds). One
        pipeline (a cluster client sends each node its partitions' calls); a node down is looked at when it is back."""
        count = max(1, min(self.count, math.ceil(self.count * share)))
        chosen = [self.ops[(turn * count + i) % self.count] for i in range(count)]
        calls = [ops.expired_call(limit) for ops in chosen]
        found: list[ExpiredLease] = []
        for reply in run_scripts(self.server, calls):
            if not isinstance(reply, BaseException):
                found += expired_leases(reply)
        return found[:limit]

    # -- what is there (reads over every partition) -------------------------------------------------------
    def pending(self) -> bool:
        """Anything queued or waiting to retry: in one partition one EXISTS; partitioned, one command on the
        hints, whatever the number of partitions: a partition hinted as having work. (Every write that adds
        work marks its partition. A partition found empty whose recheck is due, or one whose hint was lost,
        is asked by a round that runs anyway, the engine's 5-second heartbeat at the least: never a reason
        to wake.)"""
        if self.single:
            return self.ops[0].pending()
        return bool(self.server.zcount(self.keys.ready, "-inf", f"({EMPTY}"))

    def left(self) -> bool:
        """Anything queued, waiting to retry or in flight in any partition, the hints aside: does any partition's
        schedule, retries or in-flight set exist (Redis deletes a sorted set that empties; a domain in a schedule has
        requests queued). One EXISTS a partition (its keys share its slot), one in all on a plain Redis: at 48
        partitions one command, or 48 on a cluster, where a ZCARD a key was 240. What an idle worker asks before it
        may close (a dead worker's leases, links whose mark was lost)."""
        groups = [[*ops.schedules(), ops.keys.delayed, ops.keys.inflight] for ops in self.ops]
        if not self.spread:
            return bool(self.server.exists(*(key for keys in groups for key in keys)))
        pipe = self.server.pipeline(transaction=False)
        for keys in groups:
            pipe.exists(*keys)
        return any(pipe.execute())

    def queued(self) -> dict[str, int]:
        return queued_per_domain(self.server, self.keys)

    def counts(self, fields: Collection[str] = TOTALS) -> dict[str, int]:
        """The seeds waiting, and the partitions' counts summed (``fields``: only those)."""
        counts = partition_counts(self.server, self.keys.parts, [f for f in fields if f != "seeds"])
        if "seeds" not in fields:
            return counts
        try:
            seeds = count_seeds(self.server, self.keys.seeds)
        except WrongSeedKey:  # the spider says so when it reads seeds; none can be read from it
            seeds = 0
        return {"seeds": seeds, **counts}


class LayoutMismatch(RuntimeError):
    """This worker's FRONTIER_PARTITIONS (or server kind) differs from the layout the crawl's frontier has."""


def describe(keys: Keys) -> str:
    kind = " (hash-tagged, placed)" if keys.placed else " (hash-tagged)" if keys.tagged else ""  # (grouped or not)
    return f"{keys.partitions} partition{'s' if keys.partitions != 1 else ''}{kind}"


def claim_layout(server: redis.Redis, keys: Keys) -> Keys:
    """Record the frontier's layout at ``<spider>:partitions`` (its first worker), or check it; the keys to use.

    A frontier's layout is fixed for its life: a domain's partition is a hash modulo the count, so
    another count would look for queued requests, leases and filter entries where they are not.
    Raises :class:`LayoutMismatch` naming both. A frontier laid out before its partitions' tags were
    placed (recorded "tagged"), or before the keys of a round were grouped ("placed"), keeps its names: the
    keys returned are its.
    """
    wanted = keys.layout_record
    if server.set(keys.layout, wanted, nx=True):
        classic = keys.with_partitions(1)
        if keys.tagged and any(server.exists(k) for k in (classic.part(0).schedule, classic.part(0).inflight,
                                                            classic.part(0).delayed)):
            server.delete(keys.layout)
            raise LayoutMismatch(
                f"{keys.spider} has a crawl in progress in the classic layout (one partition, untagged); this worker "
                f"wants {describe(keys)}: finish it or `crawlhub reset {keys.spider}` first (docs/deploy.md: moving "
                "to a Redis Cluster)")
        if not keys.one_call:  # a new frontier holds nothing: each partition's hint says so (NX: a mark stays)
            server.zadd(keys.ready, {str(p): EMPTY + hint_ms(time.time() + random.uniform(0, 60))
                                     for p in range(keys.partitions)}, nx=True)
        return keys
    stored = text(server.get(keys.layout) or b"")
    recorded = layout_of(server, keys, stored)
    if stored and (recorded.partitions, recorded.tagged) != (keys.partitions, keys.tagged):
        raise LayoutMismatch(
            f"the frontier of {keys.spider} has {describe(recorded)}, this worker {describe(keys)}: give every worker of "
            "a spider the same FRONTIER_PARTITIONS and the same Redis (or stop its workers and `crawlhub reset` the "
            "spider to start over: a running worker records its layout again after a reset)")
    return recorded if stored else keys


def layout_of(server: redis.Redis, keys: Keys, stored: str | None = None) -> Keys:
    """``keys`` with the layout the frontier recorded (``stored``: the record, read if not given): the CLI reads
    a crawl another process set up."""
    if stored is None:
        stored = text(server.get(keys.layout) or b"")
    count, _, kind = stored.partition(":")
    if count.isdigit() and int(count) >= 1:
        return keys.with_partitions(int(count), cluster=bool(kind), placed=kind in ("placed", "grouped"),
                                    grouped=kind == "grouped")
    return keys


def frontier_keys(server: redis.Redis, settings: Any, spider: str) -> Keys:
    """A spider's keys as its frontier is laid out on ``server`` (the recorded partition count, the
    settings' when none is recorded yet; every partition tagged on a Redis Cluster)."""
    return layout_of(server, Keys.for_spider(settings, spider, cluster=isinstance(server, RedisCluster)))


def partitioned_frontiers(server: redis.Redis, settings: Any) -> list[Keys]:
    """The keys of every spider whose frontier is partitioned (hash-tagged) on ``server``."""
    found = []
    for raw in server.scan_iter("*:partitions", count=1000):
        name = text(raw)
        if "{" in name:
            continue
        keys = frontier_keys(server, settings, name[: -len(":partitions")])
        if keys.tagged and keys.layout == name:
            found.append(keys)
    return sorted(found, key=lambda k: k.spider)
