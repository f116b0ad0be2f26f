"""FrontierClient: one worker's handle on the shared frontier.

It owns the Redis connection, the spider's key names, the worker id and
every operation on the frontier: enqueue, lease, ack, retry, postpone,
dead-letter, pause and budget. It keeps the worker's leases in a
:class:`~crawlhub.frontier.leasebook.LeaseBook`, decides retries with a
:class:`~crawlhub.frontier.policy.RetryPolicy`, and batches what it has to
tell Redis (enqueues, finished downloads, acks) into the next round trip
(:meth:`FrontierClient.flush`: one ``tick`` script call).

Components reach it in one way: :func:`frontier_of(crawler) <frontier_of>`,
which is None when the crawl does not run on crawlhub's scheduler (``scrapy
shell``, a unit test, a project with another SCHEDULER): every component
then behaves as in plain Scrapy.
"""

from __future__ import annotations

import json
import logging
import time
from collections import Counter
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

import redis
from redis.cluster import RedisCluster
from scrapy import Request
from scrapy.crawler import Crawler
from scrapy.settings import BaseSettings
from scrapy.signalmanager import SignalManager
from scrapy.statscollectors import StatsCollector

from crawlhub import meta
from crawlhub import signals as crawlhub_signals
from crawlhub._utils.urls import domain_of
from crawlhub.connection import REDIS_ERRORS
from crawlhub.frontier import epoch
from crawlhub.frontier.dupefilter import RecentFingerprints, make_filters
from crawlhub.frontier.keys import Keys
from crawlhub.frontier.leasebook import Lease, LeaseBook
from crawlhub.frontier.partitions import Partitions, claim_layout
from crawlhub.frontier.policy import Requeue, RetryPolicy
from crawlhub.frontier.politeness import Politeness, read_limits
from crawlhub.frontier.records import EnqueueOp, Finish, Tick, lease_domain
from crawlhub.frontier.serializer import DecodeError, RequestSerializer
from crawlhub.quality import dlq_reason

if TYPE_CHECKING:
    from scrapy import Spider

logger = logging.getLogger(__name__)


def is_cluster(server: object) -> bool:
    return isinstance(server, RedisCluster)


def frontier_of(crawler: Crawler) -> FrontierClient | None:
    """The running crawl's FrontierClient, or None (not started, or not on crawlhub's scheduler)."""
    try:
        engine = crawler.engine
    except RuntimeError:  # the crawl has not started (Scrapy sets the engine then)
        return None
    scheduler = engine.scheduler if engine is not None else None
    client = getattr(scheduler, "frontier", None)
    return client if isinstance(client, FrontierClient) else None


def redis_uptime(server: redis.Redis) -> int:
    """Seconds since the Redis (or, for a cluster, its youngest primary) started."""
    info = server.info("server")
    if "uptime_in_seconds" in info:
        return int(info["uptime_in_seconds"])
    ups = [int(v.get("uptime_in_seconds", 0)) for v in info.values() if isinstance(v, dict)]
    return min(ups) if ups else 0


class ClusterCounters:
    """Counters added to ``<spider>:stats`` with the next upkeep (held while Redis is down)."""

    def __init__(self, server: redis.Redis, key: str):
        self.server, self.key = server, key
        self.pending: Counter[str] = Counter()

    def count(self, field: str, n: int = 1) -> None:
        self.pending[field] += n

    def send(self) -> None:
        counts, self.pending = self.pending, Counter()
        if not counts:
            return
        try:
            pipe = self.server.pipeline(transaction=False)
            for field, n in counts.items():
                pipe.hincrby(self.key, field, n)
            pipe.execute()
        except REDIS_ERRORS:
            self.pending.update(counts)  # sent when Redis is back
            raise


class FrontierClient:
    def __init__(self, server: redis.Redis, settings: BaseSettings, stats: StatsCollector, worker: str,
                 signals: SignalManager | None = None):
        self.server = server
        self.settings = settings
        self.stats = stats
        self.signals = signals or SignalManager()  # the crawler's: crawlhub.signals.page_done goes through it
        self.worker = worker
        self.leases = LeaseBook()
        self.policy = RetryPolicy.from_settings(settings)
        self.lease_ttl = settings.getfloat("LEASE_TTL")
        self.budget = settings.getint("CRAWL_BUDGET")
        self.bad_max = settings.getint("FRONTIER_BAD_REQUESTS_MAX")
        # sent with the next call to the frontier (one round trip for all):
        self.pending_enq: list[EnqueueOp] = []  # requests to enqueue
        self.pending_fin: list[Finish] = []  # downloads that are over (free their domain's slot)
        self.pending_ack: list[str] = []  # leases whose work is done
        self.safe_acks: list[str] = []  # partitioned: done leases whose pages' links an earlier round queued
        self.budget_exhausted = False
        self.paused = False  # `crawlhub pause SPIDER`: the frontier leases nothing
        self.store_full = False  # the store's buffer is full: take no new requests
        self.live_workers = 1  # of this spider, counted by the upkeep (fair shares of domain slots)
        self.redis_down = False
        self.redis_back_at = float("-inf")  # monotonic time Redis answered again after an outage (none yet)
        self.on_redis_back: list[Callable[[], None]] = []  # run when Redis answers again
        self.on_store_drained: list[Callable[[], None]] = []  # run when the store's buffer has room again
        self.lost = ""  # why the shared frontier is gone (it vanished from Redis), "" while it is there
        self.on_lost: list[Callable[[str], None]] = []  # run once when the frontier is found gone
        # the cold side: what fetches tell the URL status store (crawlhub.revisit), written by the store's flush
        self.status_updates: list[Any] = []
        self.epoch = ""  # the frontier epoch's JSON as this worker last read it (crawlhub/frontier/epoch.py)
        # the last lease round saw requests queued or delayed that were not ready yet (read by the spider's idle
        # check: the crawl is not over; as fresh as that round, at most FRONTIER_POLL_INTERVAL old). False when
        # the round could not tell (partitioned): the idle check then counts the frontier
        self.work_waiting = False
        # lease ends (retry, postponement, dead letter) that Redis did not take: (lease, what, call, then) (_send_end)
        self.held_moves: list[tuple[Lease, str, Callable[[], bool], Callable[[bool], None]]] = []

    def open(self, spider: Spider) -> None:
        settings = self.settings
        self.spider_name = spider.name
        self.keys = Keys.for_spider(settings, spider.name, cluster=is_cluster(self.server))
        claim_layout(self.server, self.keys)
        self.epoch = epoch.claim(self.server, self.keys)  # read again with every round that leases
        self.counters = ClusterCounters(self.server, self.keys.stats)
        self.politeness = Politeness.from_settings(self.server, settings, self.keys)
        self.ops = Partitions(
            self.server, self.keys, self.politeness.config(), settings.getint("FRONTIER_DOMAINS_PER_LEASE"),
            filters=make_filters(self.server, settings, self.keys),
            factor_max=self.politeness.factor_max, recovery=self.politeness.recovery,
            per_lease=settings.getint("FRONTIER_PARTITIONS_PER_LEASE", 4),
            recheck=settings.getfloat("FRONTIER_PARTITION_RECHECK", 1.0),
            replica_wait=settings.getint("FRONTIER_REPLICA_WAIT", 0),
            replica_wait_ms=settings.getint("FRONTIER_REPLICA_WAIT_TIMEOUT", 100),
        )
        self.limits_read_at = float("-inf")
        local = settings.getint("FRONTIER_LOCAL_FILTER_SIZE", 100_000)
        self.recent = RecentFingerprints(local) if local > 0 else None
        self.serializer = RequestSerializer(spider, settings.getlist("FRONTIER_REQUEST_CLASSES"))

    # -- the round trip -----------------------------------------------------------------------------
    @property
    def has_pending_writes(self) -> bool:
        return bool(self.pending_enq or self.pending_fin or self.pending_ack or self.safe_acks)

    def enqueue(self, request: Request, fingerprint: str | bytes) -> None:
        """Queue a request with the next round trip (always before the lease it ends, same call).

        Raises :class:`~crawlhub.frontier.serializer.EncodeError` if it cannot be JSON.
        """
        ends = self.leases.ended_by(request)
        key = None
        if self.recent is not None and not request.dont_filter and not ends:
            key = self.recent.key(fingerprint)
            if key in self.recent:  # sent lately: a duplicate in the shared filter too
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
        self.pending_enq.append(EnqueueOp(fingerprint, payload, request.priority, request.dont_filter, ends,
                                          domain_of(request.url)))

    def flush(self, n: int = 0) -> Tick | None:
        """One round trip: send what is pending (enqueues, finished downloads, acks) and take up to n requests.

        What could not be sent (Redis down) stays pending for the next call.
        """
        enq, fin, ack, safe = self.pending_enq, self.pending_fin, self.pending_ack, self.safe_acks
        if not (enq or fin or ack or safe or n):
            self._send_held_moves()
            return None
        self.pending_enq, self.pending_fin, self.pending_ack, self.safe_acks = [], [], [], []
        try:
            if n and not self.ops.single:
                self._read_limits()
            outcome = self.ops.tick(enq, fin, ack, n, self.worker, self.lease_ttl, self.budget, self.live_workers,
                                    self.leases.held() if n and self.live_workers > 1 else None, safe_acks=safe)
        except REDIS_ERRORS as exc:
            logger.warning("Redis unavailable (%s): %d enqueues and %d acks held until it is back", exc, len(enq),
                           len(ack) + len(safe))
            self.pending_enq[:0], self.pending_fin[:0], self.pending_ack[:0] = enq, fin, ack
            self.safe_acks[:0] = safe
            self.redis_down = True
            return None
        result = outcome.tick
        if outcome.failed:  # some partitions' nodes did not answer (a failover): theirs wait for the next round
            logger.warning("%d partitions did not answer (%s): %d enqueues and %d acks held for the next round",
                           outcome.failed, outcome.error, len(outcome.unsent_enq), len(outcome.unsent_ack))
            self.pending_enq[:0], self.pending_fin[:0] = outcome.unsent_enq, outcome.unsent_fin
            unsent_safe = set(outcome.unsent_ack) & set(safe)
            self.safe_acks[:0] = [a for a in outcome.unsent_ack if a in unsent_safe]
            # this round's links did not all get queued: the acks held back wait for them again
            self.pending_ack[:0] = [a for a in outcome.unsent_ack if a not in unsent_safe] + outcome.deferred_ack
            unsent = set(outcome.unsent_enq)
            enq = [op for op in enq if op not in unsent]
            ack = [a for a in [*safe, *ack] if a not in set(outcome.unsent_ack) and a not in set(outcome.deferred_ack)]
        else:
            self.safe_acks.extend(outcome.deferred_ack)  # their links are queued: they end with the next round
            if outcome.deferred_ack:
                held = set(outcome.deferred_ack)
                ack = [a for a in [*safe, *ack] if a not in held]
            else:
                ack = [*safe, *ack]
        if outcome.failed:
            self._forget_sent()  # a failover may have lost writes the local filter mirrors
        else:  # every partition answered, so the links queued before a held end are in: send the held ends
            self._send_held_moves()
        if self.redis_down:  # back: renew at once, and reclaim nobody's leases for a LEASE_TTL
            self.redis_down, self.redis_back_at = False, time.monotonic()
            self._forget_sent()  # a restart from its AOF may have lost the last writes the local filter mirrors
            for callback in self.on_redis_back:
                callback()
        if enq:
            self.stats.inc_value("scheduler/enqueued/redis", result.added)
            if len(enq) > result.added:
                self.stats.inc_value("dupefilter/filtered", len(enq) - result.added)
        if ack:
            self.stats.inc_value("leases/acked", len(ack))
        return result

    @property
    def epoch_id(self) -> str:
        """The id of the frontier epoch this worker knows ("" before it opened): the store counts the
        documents it stores for the first time in it (crawlhub.signals.items_stored)."""
        known = epoch.Epoch.parse(self.epoch)
        return known.id if known else ""

    def _watch_epoch(self, seen: str | None) -> None:
        """A round read the frontier's epoch: a reset drops this worker's copies of the old state; a frontier
        that vanished is said loudly, recorded, and ends this worker's crawl (never as "finished")."""
        verdict = epoch.judge(self.epoch, seen)
        if verdict == "same" or seen is None:  # (None: not read this round; judge says "same", mypy wants a str)
            return
        self.epoch = seen
        self._forget_sent()  # it mirrored the shared duplicate filter, which is not the same any more
        if verdict == "moved":
            moved = epoch.Epoch.parse(seen)
            self.budget_exhausted = False
            logger.info("The frontier of %s was replaced (%s at %s): this worker dropped its local link filter "
                        "and goes on with the new one", self.spider_name, moved.why if moved else "?",
                        time.strftime("%H:%M:%S", time.localtime(moved.at)) if moved else "?")
            self.stats.inc_value("frontier/epoch_moved")
            return
        if not seen:  # gone: made anew, so that every other worker finds it changed too
            self.epoch = epoch.claim(self.server, self.keys)
        self._vanished()

    def _forget_sent(self) -> None:
        """Empty the local link filter: the shared filter it mirrors was replaced or may have lost writes."""
        if self.recent is not None:
            self.recent.clear()

    def _vanished(self) -> None:
        held = len(self.leases)
        self.lost = (f"the shared frontier of {self.spider_name} vanished from Redis (its epoch key "
                     f"{self.keys.epoch} is gone or made anew): its queue, duplicate filter and leases are lost")
        logger.error("%s. Redis restarted without its data (run it with appendonly yes: docs/deploy.md), or its keys "
                     "were deleted. This worker puts back the %d pages it holds and stops (close reason "
                     "frontier_lost); pages that were only queued are lost: seed the crawl again (`crawlhub seeds`) "
                     "and restart the workers.", self.lost, held)
        self.stats.inc_value("frontier/vanished")
        record = json.dumps({"at": time.time(), "worker": self.worker, "what": "frontier vanished",
                             "held_pages": held}, separators=(",", ":"))
        try:
            pipe = self.server.pipeline(transaction=False)
            pipe.lpush(self.keys.incidents, record)
            pipe.ltrim(self.keys.incidents, 0, 99)
            pipe.execute()
        except REDIS_ERRORS as exc:
            logger.warning("Could not record the incident in %s: %s", self.keys.incidents, exc)
        for callback in self.on_lost:
            callback(self.lost)

    def _read_limits(self) -> None:
        """Partitioned, the run-time limits (`crawlhub limits`, a cluster-wide hash) go with each tick,
        read again every FRONTIER_POLL_INTERVAL."""
        now = time.monotonic()
        if now - self.limits_read_at < max(0.5, self.settings.getfloat("FRONTIER_POLL_INTERVAL")):
            return
        self.limits_read_at = now
        self.ops.limits = read_limits(self.server)

    def lease(self, n: int) -> tuple[list[Request], Tick | None]:
        """Take up to ``n`` requests (sending what is pending with them). The Tick says why none came
        (budget, pause, wait); None when Redis did not answer."""
        result = self.flush(n)
        if result is None:
            return [], None
        self._watch_epoch(result.epoch)
        self.work_waiting = bool(result.waiting)
        if result.budget_exhausted and not self.budget_exhausted:
            self.budget_exhausted = True
            logger.info("The crawl budget is used up: this worker takes no more requests")
        if result.paused != self.paused:
            self.paused = result.paused
            logger.info("%s is %s", self.spider_name, "paused (`crawlhub resume` to go on): taking no requests"
                        if self.paused else "resumed")
        requests = []
        for lease_id, payload in result.taken:
            try:
                request = self.serializer.decode(payload)
            except DecodeError as exc:
                self.set_aside(payload, str(exc))
                self.pending_ack.append(lease_id)
                continue
            self.leases.add(lease_id, request, payload)
            requests.append(request)
        if requests:
            self.stats.inc_value("scheduler/dequeued/redis", len(requests))
        return requests, result

    def pending(self) -> bool:
        """Anything for this spider queued or waiting to retry, in the whole cluster."""
        return self.ops.pending()

    def counts(self) -> dict[str, int]:
        return self.ops.counts()

    def set_aside(self, payload: bytes, reason: str) -> None:
        """Keep an undecodable payload in <spider>:bad_requests, with why (it is never executed)."""
        logger.warning("Refused a request payload from %s (%s); set aside in %s", self.keys.queue_key, reason,
                       self.keys.bad_requests)
        self.stats.inc_value("frontier/bad_requests")
        record = json.dumps({"reason": reason, "payload": payload[:4096].decode("utf-8", "backslashreplace"),
                             "queue": self.keys.queue_key, "at": time.time()})
        with self.server.pipeline() as pipe:
            pipe.lpush(self.keys.bad_requests, record)
            pipe.ltrim(self.keys.bad_requests, 0, self.bad_max - 1)
            pipe.execute()

    # -- downloads and page output --------------------------------------------------------------------
    def lease_of(self, request: Request | None) -> Lease | None:
        return self.leases.of(request)

    def download_finished(self, request: Request, status: int | None, retry_after: float = 0.0) -> None:
        """A download is over: its domain's concurrency slot frees with the next call to the
        frontier; a slow-down (429/503) is sent at once, so every worker slows down now."""
        lease_id = request.meta.get(meta.LEASE) or ""
        domain = lease_domain(lease_id) or domain_of(request.url)
        self.leases.download_finished(lease_id)
        outcome = self.politeness.outcome(status)
        done = Finish(domain, lease_id, outcome, retry_after)
        if outcome != "slow":
            if lease_id or outcome:
                self.pending_fin.append(done)
            return
        try:
            factor = self.ops.finish(done)
        except REDIS_ERRORS as exc:
            logger.warning("Redis unavailable (%s): the slow-down of %s is held until it is back", exc, domain)
            self.pending_fin.append(done)
            return
        self.stats.inc_value(f"politeness/slowdown/{domain}")
        logger.info(
            "%s answered %s: every worker slows down on %s (factor %g%s)",
            request.url, status, domain, factor, f", none before {retry_after:g}s" if retry_after else "",
        )

    def item_emitted(self, request: Request | None) -> None:
        self.leases.item_emitted(request)

    def item_finished(self, request: Request | None, invalid: bool = False) -> None:
        self._done(self.leases.item_finished(request, invalid))

    def output_finished(self, request: Request | None, error: BaseException | None = None) -> None:
        self._done(self.leases.output_finished(request, error))

    def _done(self, lease: Lease | None) -> None:
        if lease is None:
            return
        if lease.error is None and lease.request is not None:
            # the page's judges (crawlhub.extensions.quality) may amend what the store does after it
            self.signals.send_catch_log(crawlhub_signals.page_done, request=lease.request, status=lease.status,
                                        items=lease.items, invalid=lease.invalid, after_store=lease.after_store)
        if self.leases.wait_for_store:
            self.leases.ready.append(lease.id)  # ended after the store's next flush
        else:
            self._end([lease.id])

    # -- the store's handshake (MongoPipeline) ------------------------------------------------------------
    def store_opened(self) -> None:
        """A store that acknowledges writes is in use: a done lease ends after its next flush."""
        self.leases.wait_for_store = True

    def flush_started(self) -> list[str]:
        """The store begins a flush: the leases it covers (everything done before it began)."""
        return self.leases.take_ready()

    def flush_succeeded(self, lease_ids: list[str]) -> None:
        self._end(lease_ids)

    def flush_failed(self, lease_ids: list[str]) -> None:
        self.leases.put_back(lease_ids)

    def record_status(self, update: Any) -> None:
        """A fetch's news for the URL status store, written with the store's next flush."""
        self.status_updates.append(update)

    def take_status_updates(self) -> list[Any]:
        updates, self.status_updates = self.status_updates, []
        return updates

    def status_updates_failed(self, updates: list[Any]) -> None:
        self.status_updates[:0] = updates

    def store_backlog(self, full: bool) -> None:
        """The store's buffer is full (take no new requests) or has drained."""
        self.store_full = full
        if not full:
            for callback in self.on_store_drained:
                callback()

    # -- how a lease ends ----------------------------------------------------------------------------------
    def _end(self, lease_ids: list[str]) -> None:
        """End leases whose items are stored: ack, or dead-letter if the callback failed."""
        done = []
        for lease_id in lease_ids:
            lease = self.leases.get(lease_id)
            if lease is not None and lease.error:
                self._dead_letter(lease, json.loads(lease.payload).get("meta", {}), lease.error)
            else:
                self.leases.pop(lease_id)
                done.append(lease_id)
                if lease is not None:
                    for update in lease.after_store:  # its items are stored: the store's next flush
                        self.record_status(update)
        self.ack(done)

    def ack(self, lease_ids: list[str]) -> None:
        """Acks go with the next call to the frontier (the upkeep sends them when the worker is idle)."""
        self.pending_ack.extend(lease_ids)

    def dropped(self, request: Request, reason: str) -> None:
        """The request will not be fetched (robots, offsite...): its lease ends."""
        lease = self.leases.of(request)
        if lease is not None:
            self.leases.pop(lease.id)
            self.ack([lease.id])
            self.stats.inc_value("leases/dropped")
            logger.debug("Dropped %s: %s", request.url, reason)

    def retry(self, request: Request, reason: str, retry_after: float = 0.0, status: int | None = None) -> str | None:
        """Send the request back through the shared frontier after a backoff, or to the DLQ.

        Returns "retry", "dlq", or None when the request holds no lease of ours.
        """
        lease = self.leases.of(request)
        if lease is None:
            return None
        self.flush()
        attempts = self.policy.attempts(request.meta)
        if self.policy.gives_up(attempts):
            self.dead_letter(request, error=reason, status=status, attempts=attempts)
            return "dlq"
        delay = self.policy.backoff(attempts, retry_after)
        again = request.replace(dont_filter=True)
        again.meta.pop(meta.LEASE, None)
        again.meta[meta.ATTEMPTS] = attempts
        again.meta.setdefault(meta.FIRST_ATTEMPT, time.time())
        self.leases.pop(lease.id)

        def retried(moved: bool) -> None:
            if moved:
                self.stats.inc_value("retry/count")
                self.stats.inc_value(f"retry/reason_count/{reason.split(':')[0]}")
                self.count("retries")
                logger.info("Retrying %s in %.1fs (attempt %d of %d): %s", request.url, delay, attempts + 1,
                            self.policy.retry_times + 1, reason)

        self._send_end(lease, "retry", partial(self.ops.delay, lease.id, self.serializer.encode(again), delay),
                       retried)
        return "retry"

    def postpone(self, request: Request, seconds: float, reason: str) -> bool:
        """Put the request back for later without counting an attempt (its site is not ready)."""
        lease = self.leases.of(request)
        if lease is None:
            return False
        self.flush()
        later = request.replace(dont_filter=True)
        later.meta.pop(meta.LEASE, None)
        later.meta.pop(meta.RESLOT, None)
        self.leases.pop(lease.id)

        def postponed(moved: bool) -> None:
            if moved:
                self.stats.inc_value("scheduler/postponed")
                logger.info("Postponed %s for %.0fs: %s", request.url, seconds, reason)

        return self._send_end(lease, "postponement",
                              partial(self.ops.delay, lease.id, self.serializer.encode(later), seconds), postponed)

    def dead_letter(self, request: Request, error: str, status: int | None = None, attempts: int | None = None) -> None:
        lease = self.leases.of(request)
        if lease is not None:
            self._dead_letter(lease, request.meta, error, status, attempts)

    def _dead_letter(self, lease: Lease, request_meta: dict[str, Any], error: str, status: int | None = None,
                     attempts: int | None = None) -> None:
        self.leases.pop(lease.id)
        self.flush()  # the page's links are queued before its lease ends
        record = self.policy.dead_letter(self.spider_name, self.worker, lease.url, lease.payload, request_meta,
                                         error, status, attempts)

        def dead_lettered(moved: bool) -> None:
            if moved:
                self.stats.inc_value("dlq/count")
                self.stats.inc_value(f"dlq/reason/{dlq_reason(error, status)}")  # the quality figures' DLQ by reason
                logger.error("Gave up on %s after %d attempts (%s); in %s", lease.url, record.attempts, error,
                             self.keys.part_of(lease_domain(lease.id)).dlq)

        self._send_end(lease, "dead letter", partial(self.ops.dead_letter, lease.id, record), dead_lettered)

    def _send_end(self, lease: Lease, what: str, move: Callable[[], bool], then: Callable[[bool], None]) -> bool:
        """Send a lease's end that is its own script call (a retry, a postponement, a dead letter); ``then`` gets
        the outcome. Redis down: the lease goes back in the book, where it is renewed (nobody reclaims it) and
        the warden's sweep leaves it alone, and the call is held until a round trip succeeds again."""
        try:
            moved = move()
        except REDIS_ERRORS as exc:
            lease.output_done = True
            self.leases.restore(lease)
            self.held_moves.append((lease, what, move, then))
            self.redis_down = True
            logger.warning("Redis unavailable (%s): the %s of %s is held until it is back; its lease is renewed "
                           "meanwhile", exc, what, lease.url)
            return False
        then(moved)
        return moved

    def _send_held_moves(self) -> None:
        """The lease ends held while Redis was down, in order; what fails again stays held."""
        while self.held_moves:
            lease, what, move, then = self.held_moves[0]
            try:
                moved = move()
            except REDIS_ERRORS:
                return
            self.held_moves.pop(0)
            self.leases.pop(lease.id)
            logger.info("Redis is back: the held %s of %s is sent", what, lease.url)
            then(moved)

    def permanent_failure(self, request: Request, status: int) -> None:
        if self.leases.of(request) is None:  # robots.txt and other side requests do not count
            return
        domain = domain_of(request.url)
        self.stats.inc_value(f"permanent_failures/{domain}")
        self.count(f"permanent_failures:{domain}")

    def count(self, field: str, n: int = 1) -> None:
        """Add ``n`` to ``field`` of ``<spider>:stats`` (sent with the next upkeep)."""
        self.counters.count(field, n)

    # -- upkeep (crawlhub.frontier.upkeep calls these) ---------------------------------------------------
    def renew(self) -> None:
        lost = self.ops.renew(self.leases.ids(), self.lease_ttl)
        if lost:
            self.stats.inc_value("leases/lost", len(lost))
            logger.warning("%d leases expired before this worker renewed them (they may be crawled twice)", len(lost))

    def count_live_workers(self, dead_after: float) -> None:
        """Live workers of this spider (heartbeats), so that a domain's slots are shared among them."""
        now = time.time()
        alive = 0
        for raw in self.server.hvals(self.keys.workers):
            try:
                record = json.loads(raw)
            except ValueError:
                continue
            alive += record.get("state") == "running" and now - record.get("last_beat", 0) <= dead_after
        self.live_workers = max(1, alive)

    def reclaim(self) -> int:
        """Put expired leases (their worker died) back in the queue, counting an attempt.

        Not while Redis has been up, or reachable from this worker, for less than LEASE_TTL:
        after an outage every live worker's leases look expired until it has renewed them.
        """
        if time.monotonic() - self.redis_back_at < self.lease_ttl:
            return 0
        if redis_uptime(self.server) < self.lease_ttl:
            return 0
        if not self.server.set(self.keys.reclaim_lock, self.worker, nx=True, px=int(self.lease_ttl * 1000)):
            return 0
        reclaimed = 0
        try:
            for expired in self.ops.expired():
                if expired.lease_id in self.leases:  # ours, and alive: renew missed, keep it
                    continue
                fate = self.policy.after_expiry(expired, self.spider_name)
                if fate is None:
                    self.ack([expired.lease_id])
                elif isinstance(fate, Requeue):
                    if self.ops.requeue(expired.lease_id, fate.payload, fate.priority):
                        reclaimed += 1
                        logger.info("Reclaimed %s from %s (lease expired)", fate.url, expired.worker)
                else:
                    self.ops.dead_letter(expired.lease_id, fate)
        finally:
            self.server.delete(self.keys.reclaim_lock)
        if reclaimed:
            self.stats.inc_value("leases/reclaimed", reclaimed)
            self.count("reclaimed", reclaimed)
        return reclaimed

    # -- closing -----------------------------------------------------------------------------------------
    def close(self) -> None:
        """Send what is pending and give back every lease still held; never flush the shared frontier."""
        for _ in range(3):  # partitioned, acks held back by one round go with the next
            self.flush()
            if not self.has_pending_writes or self.redis_down:
                break
        try:
            self.counters.send()
        except REDIS_ERRORS as exc:
            logger.warning("Could not send %d counters to Redis at close: %s", sum(self.counters.pending.values()), exc)
        returned = 0
        for lease in self.leases:
            try:
                if self.lost:  # its lease record vanished with the frontier: queued again as it was
                    self.ops.push(lease.payload, lease.priority, lease_domain(lease.id))
                    returned += 1
                    continue
                returned += self.ops.requeue(lease.id, lease.payload, lease.priority)
            except REDIS_ERRORS as exc:
                logger.error("Could not give lease %s (%s) back: %s; it returns when it expires", lease.id, lease.url, exc)
        if returned:
            logger.info("Gave %d unfinished requests back to the shared queue", returned)
        self.leases.clear()
        if self.budget_exhausted:
            left = self.ops.counts()
            logger.info("Crawl budget used up; left in the frontier: %(queued)d queued, %(delayed)d waiting to retry", left)
