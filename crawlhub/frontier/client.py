"""FrontierClient: one worker's handle on the shared frontier, used by the scheduler alone.

It owns the Redis connection, the spider's key names and the worker id, and
carries out the frontier's operations: enqueue, lease, and a lease's end
(ack, retry, postpone, dead letter, drop). It keeps the worker's leases in a
:class:`~crawlhub.frontier.leasebook.LeaseBook`, decides retries with a
:class:`~crawlhub.frontier.policy.RetryPolicy`, and batches what it has to
tell Redis (enqueues, finished downloads, acks) into the next round trip
(:meth:`FrontierClient.flush`: one ``tick`` script call).

Components never call it: they send intent (crawlhub.intent, crawlhub.signals) and read
through :mod:`crawlhub.frontier.view`, which it implements. How leases end: crawlhub.frontier.ends.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Callable, Collection
from typing import TYPE_CHECKING

import redis
from redis.cluster import RedisCluster
from scrapy import Request
from scrapy.settings import BaseSettings
from scrapy.signalmanager import SignalManager
from scrapy.statscollectors import StatsCollector

from crawlhub._utils.urls import domain_of
from crawlhub.connection import REDIS_ERRORS
from crawlhub.frontier.counters import ClusterCounters
from crawlhub.frontier.dupefilter import RecentFingerprints
from crawlhub.frontier.ends import HeldEnd, LeaseEnds
from crawlhub.frontier.epoch import EpochWatch
from crawlhub.frontier.keys import Keys
from crawlhub.frontier.leasebook import Lease, LeaseBook
from crawlhub.frontier.operations import TOTALS
from crawlhub.frontier.partitions import Partitions, claim_layout
from crawlhub.frontier.policy import RetryPolicy
from crawlhub.frontier.politeness import Politeness, read_limits
from crawlhub.frontier.records import EnqueueOp, Tick
from crawlhub.frontier.serializer import RequestSerializer
from crawlhub.frontier.upkeep import dead_after, live_workers
from crawlhub.roles import Roles, queue_of

if TYPE_CHECKING:
    from scrapy import Spider

__all__ = ["ClusterCounters", "FrontierClient"]

logger = logging.getLogger(__name__)


class FrontierClient:
    def __init__(self, server: redis.Redis, settings: BaseSettings, stats: StatsCollector, worker: str,
                 signals: SignalManager | None = None):
        self.server, self.settings, self.stats, self.worker = server, settings, stats, worker
        self.signals = signals or SignalManager()  # the crawler's: status_observed goes through it
        self.leases = LeaseBook()
        self.ends = LeaseEnds(self)
        self.policy = RetryPolicy.from_settings(settings)
        self.lease_ttl = settings.getfloat("LEASE_TTL")
        self.budget = settings.getint("CRAWL_BUDGET")
        self.pending_enq: list[EnqueueOp] = []  # with the next round trip, as the book's finished downloads
        self.pending_ack: list[str] = []
        self.safe_acks: list[str] = []  # partitioned: done leases whose pages' links an earlier round queued
        self.budget_exhausted = self.paused = False  # (paused: `crawlhub pause SPIDER`, the frontier leases nothing)
        self.live_workers = 1  # of this spider, counted by the upkeep (fair shares of domain slots)
        # the rungs this worker takes, and those of the live workers (read with their count): which lanes are used
        self.roles = Roles.from_settings(settings)
        self.leases_elsewhere = 0  # leases the other live workers said they held, read with them
        self.redis_down, self.redis_back_at = False, float("-inf")  # (the monotonic time Redis came back)
        self.on_redis_back: list[Callable[[], None]] = []  # run when Redis answers again
        self.lost = ""  # why the shared frontier is gone (it vanished from Redis), "" while it is there
        self.on_lost: list[Callable[[str], None]] = []  # run once when the frontier is found gone
        # the last lease round saw requests queued or delayed that were not ready yet (read by the spider's idle
        # check; as fresh as that round). False when the round could not tell (partitioned): the check counts
        self.work_waiting = False

    def open(self, spider: Spider) -> None:
        settings = self.settings
        self.spider_name, self.spider = spider.name, spider
        self.keys = Keys.for_spider(settings, spider.name, cluster=isinstance(self.server, RedisCluster))
        # a frontier this worker lays out holds nothing yet: nothing to count and say at start
        self.fresh = not self.server.exists(self.keys.layout)
        self.keys = claim_layout(self.server, self.keys)
        self.epoch = EpochWatch(self.server, self.keys, spider.name, self.worker)
        self.counters = ClusterCounters(self.server, self.keys.stats)
        self.politeness = Politeness.from_settings(self.server, settings, self.keys)
        # the live workers' rungs before the first lease: a lane of a rung another worker takes is not this one's
        with contextlib.suppress(*REDIS_ERRORS):
            live_workers(self.server, self.keys.workers, dead_after(settings), self.worker, self.roles)
        self.ops = Partitions.from_settings(self.server, settings, self.keys, self.politeness, self.roles.lanes)
        self.limits_read_at = float("-inf")
        local = settings.getint("FRONTIER_LOCAL_FILTER_SIZE", 100_000)
        self.recent = RecentFingerprints(local) if local > 0 else None
        self.serializer = RequestSerializer(spider, settings.getlist("FRONTIER_REQUEST_CLASSES"))

    @property
    def held_moves(self) -> list[HeldEnd]:  # lease ends Redis did not take, sent when it is back
        return self.ends.held

    @property
    def epoch_id(self) -> str:
        """The id of the frontier epoch this worker knows ("" before it opened)."""
        return self.epoch.id if hasattr(self, "epoch") else ""

    @property
    def leases_held(self) -> int:
        return len(self.leases)

    @property
    def has_pending_writes(self) -> bool:  # (what the next round trip sends)
        return bool(self.pending_enq or self.leases.finished or self.pending_ack or self.safe_acks or self.ops.holding)

    def enqueue(self, request: Request, fingerprint: str) -> None:
        """Queue a request with the next round trip (always before the lease it ends, same call).

        Raises :class:`~crawlhub.frontier.serializer.EncodeError` if it cannot be JSON.
        """
        ends = self.leases.ended_by(request)
        key = self.recent.key(fingerprint) if self.recent is not None and not request.dont_filter and not ends else None
        if key is not None and key in self.recent:  # type: ignore[operator]  # sent lately: in the shared filter too
            self.stats.inc_value("dupefilter/filtered")
            self.stats.inc_value("dupefilter/filtered_locally")
            return
        try:
            payload = self.serializer.encode(request)
        except Exception:
            if ends:
                self.ack([ends])
            raise
        if key is not None:
            self.recent.add(key)  # type: ignore[union-attr]
        # a forced request that ends no lease gets an id: sent again after a lost reply, it is queued once
        token = os.urandom(8).hex() if request.dont_filter and not ends else ""
        self.pending_enq.append(EnqueueOp(fingerprint, payload, request.priority, request.dont_filter, ends,
                                          queue_of(domain_of(request.url), self.lane_for(request)), token))

    def lane_for(self, request: Request) -> str:
        """The lane this request is queued in (crawlhub.roles): '' unless it needs a rung some workers take."""
        try:
            return self.roles.lane_for(request, getattr(self, "spider", None))
        except ValueError:  # a pin that is not a rung: the ladder says so when the request is downloaded
            return ""

    def flush(self, n: int = 0, ahead: int = 0) -> Tick | None:
        """One round trip: send what is pending (enqueues, finished downloads, acks) and take up to n requests
        (and up to ``ahead`` more from domains with no pace and no cap: FRONTIER_LEASE_AHEAD).

        What could not be sent (Redis down) stays pending for the next call.
        """
        enq, ack, safe = self.pending_enq, self.pending_ack, self.safe_acks
        if not (self.has_pending_writes or n):
            self.ends.send_held()
            return None
        fin = self.leases.take_finished()
        self.pending_enq, self.pending_ack, self.safe_acks = [], [], []
        try:
            if n and self.keys.tagged and time.monotonic() - self.limits_read_at >= max(
                    0.5, self.settings.getfloat("FRONTIER_POLL_INTERVAL")):  # tagged: run-time limits (cluster-wide)
                self.limits_read_at, self.ops.limits = time.monotonic(), read_limits(self.server)
            outcome = self.ops.tick(enq, fin, ack, n, self.worker, self.lease_ttl, self.budget, self.live_workers,
                                    self.leases.held() if n and self.live_workers > 1 else None, safe_acks=safe,
                                    ahead=ahead)
        except REDIS_ERRORS as exc:
            logger.warning("Redis unavailable (%s): %d enqueues and %d acks held until it is back", exc, len(enq),
                           len(ack) + len(safe))
            self.pending_enq[:0], self.leases.finished[:0], self.pending_ack[:0] = enq, fin, ack
            self.safe_acks[:0] = safe
            self.redis_down = True
            return None
        if outcome.failed:  # some partitions' nodes did not answer (a failover): theirs wait for the next round
            logger.warning("%d partitions did not answer (%s): %d enqueues and %d acks held for the next round",
                           outcome.failed, outcome.error, len(outcome.unsent_enq), len(outcome.unsent_ack))
            self.pending_enq[:0], self.leases.finished[:0] = outcome.unsent_enq, outcome.unsent_fin
            unsent, unsent_safe = set(outcome.unsent_ack), set(outcome.unsent_ack) & set(safe)
            self.safe_acks[:0] = [a for a in outcome.unsent_ack if a in unsent_safe]
            # this round's links did not all get queued: the acks held back wait for them again
            self.pending_ack[:0] = [a for a in outcome.unsent_ack if a not in unsent_safe] + outcome.deferred_ack
            enq = [op for op in enq if op not in set(outcome.unsent_enq)]
            ack = [a for a in [*safe, *ack] if a not in unsent and a not in set(outcome.deferred_ack)]
            self._forget_sent()  # a failover may have lost writes the local filter mirrors
        else:
            self.safe_acks.extend(outcome.deferred_ack)  # their links are queued: they end with the next round
            held = set(outcome.deferred_ack)
            ack = [a for a in [*safe, *ack] if a not in held]
            self.ends.send_held()  # every partition answered: the links queued before a held end are in
        if outcome.held_sent:  # links an earlier round held for this partition's next call (FRONTIER_LINK_HOLD)
            self.stats.inc_value("frontier/links_held", outcome.held_sent)
        if self.redis_down:  # back: renew at once, and reclaim nobody's leases for a LEASE_TTL
            self.redis_down, self.redis_back_at = False, time.monotonic()
            self._forget_sent()  # a restart from its AOF may have lost the last writes the local filter mirrors
            for callback in self.on_redis_back:
                callback()
        result = outcome.tick
        if enq:
            self.stats.inc_value("scheduler/enqueued/redis", result.added)
            if len(enq) > result.added:
                self.stats.inc_value("dupefilter/filtered", len(enq) - result.added)
        if ack:
            self.stats.inc_value("leases/acked", len(ack))
        return result

    def _forget_sent(self) -> None:
        """Empty the local link filter: the shared filter it mirrors was replaced or may have lost writes."""
        if self.recent is not None:
            self.recent.clear()

    def lease(self, n: int, ahead: int = 0) -> tuple[list[Request], Tick | None]:
        """Take up to ``n`` requests, and up to ``ahead`` more from domains with no pace and no cap (sending what
        is pending with them). The Tick says why none came (budget, pause, wait); None when Redis did not answer."""
        result = self.flush(n, ahead)
        if result is None:
            return [], None
        verdict = self.epoch.see(result.epoch)
        if verdict != "same":  # a reset (or a vanished frontier): the local link filter mirrored the old one
            self._forget_sent()
            self.stats.inc_value("frontier/epoch_moved" if verdict == "moved" else "frontier/vanished")
            self.budget_exhausted = self.budget_exhausted and verdict == "vanished"
            if verdict == "vanished":
                self.lost = self.epoch.lost(len(self.leases))
            elif verdict == "moved":
                self.lost = self._keep_layout()
            if self.lost:
                for callback in self.on_lost:
                    callback(self.lost)
        self.work_waiting = bool(result.waiting)
        if result.budget_exhausted and not self.budget_exhausted:
            self.budget_exhausted = True
            logger.info("The crawl budget is used up: this worker takes no more requests")
        if result.paused != self.paused:
            self.paused = result.paused
            logger.info("%s is %s", self.spider_name, "paused (`crawlhub resume` to go on): taking no requests"
                        if self.paused else "resumed")
        requests = self.leases.take(result.taken, self.serializer.decode, self._refused)
        if requests:
            self.stats.inc_value("scheduler/dequeued/redis", len(requests))
        return requests, result

    def _keep_layout(self) -> str:
        """After a reset: the reset deleted the layout record with the rest of the crawl, and this worker goes on
        in its layout (its key names), so it records it again (NX: the first worker to see the reset does), and a
        worker started after the reset finds the names the running ones use. A worker that started in between
        has laid out the frontier anew (another partition count, or grouped keys where this worker's crawl had
        them ungrouped): this worker cannot go on beside it; why, for the close ("" when it goes on)."""
        keys = self.keys
        try:
            if self.server.set(keys.layout, keys.layout_record, nx=True):
                return ""
            raw = self.server.get(keys.layout)
        except REDIS_ERRORS:
            return ""  # (Redis is down: the record is made again by the next worker that starts)
        stored = raw.decode() if isinstance(raw, bytes) else str(raw or "")
        if stored in ("", keys.layout_record):  # ("": deleted again between the two calls: the next round says)
            return ""
        why = (f"the frontier of {keys.spider} was reset and laid out anew by another worker ({keys.layout} = "
               f"{stored!r}) while this one ran in the layout {keys.layout_record!r}")
        logger.error("%s: their key names differ. This worker puts back the %d pages it holds and stops (close "
                     "reason frontier_lost); restart it to work in the new layout.", why, len(self.leases))
        return why

    def _refused(self, lease_id: str, payload: bytes, why: str) -> None:
        """A payload that does not decode: set aside with why (never executed), its lease ended."""
        self.ops.set_aside(payload, why, self.settings.getint("FRONTIER_BAD_REQUESTS_MAX"))
        self.stats.inc_value("frontier/bad_requests")
        self.pending_ack.append(lease_id)

    def pending(self) -> bool:
        """Anything for this spider queued or waiting to retry, in the whole cluster."""
        return self.ops.pending()

    def left(self) -> bool:
        """Anything queued, waiting to retry or in flight, in the whole cluster (one EXISTS a partition at most)."""
        return self.ops.left()

    def counts(self, fields: Collection[str] = TOTALS) -> dict[str, int]:
        return self.ops.counts(fields)

    def count(self, field: str, n: int = 1) -> None:
        """Add ``n`` to ``field`` of ``<spider>:stats`` (sent with the next upkeep)."""
        self.counters.count(field, n)

    def lease_of(self, request: Request | None) -> Lease | None:  # (the lease a request holds)
        return self.leases.of(request)

    def ack(self, lease_ids: list[str]) -> None:
        """Acks go with the next call to the frontier (the upkeep sends them when the worker is idle)."""
        self.pending_ack.extend(lease_ids)

    def retry(self, request: Request, reason: str, retry_after: float = 0.0, status: int | None = None) -> str | None:
        return self.ends.retry(request, reason, retry_after, status)

    def postpone(self, request: Request, seconds: float, reason: str) -> bool:
        return self.ends.postpone(request, seconds, reason)

    def dead_letter(self, request: Request, error: str, status: int | None = None) -> None:
        self.ends.dead_letter(request, error, status)

    def close(self) -> None:
        """Send what is pending and give back every lease still held; never flush the shared frontier."""
        self.ops.drain()  # partitioned: links and acks held for later rounds go now
        for _ in range(3):  # partitioned, acks held back by one round go with the next
            self.flush()
            if not self.has_pending_writes or self.redis_down:
                break
        self.ends.give_back()
