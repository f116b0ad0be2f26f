"""The shared scheduler: scrapy-redis's, with leases so that nothing is lost.

What differs from ``scrapy_redis.scheduler.Scheduler``:

* built with ``from_crawler`` only, on crawlhub's Redis client, for Scrapy 2.19;
* requests are JSON (:mod:`crawlhub.frontier.serializer`); a payload that does
  not decode is set aside in ``<spider>:bad_requests``, never executed;
* the queue and duplicate filter are never flushed by a worker (only
  ``crawlhub reset`` does); seeds (``dont_filter``) are recorded as seen too;
* **leases**: taking a request moves it to ``<spider>:inflight`` with a
  deadline (:mod:`crawlhub.frontier.leases`). The lease ends exactly once:
  acked after the page's items are stored (MongoPipeline's flush), moved to
  ``<spider>:delayed`` for a retry or to ``<spider>:dlq``, ended by the
  enqueue of its redirect, or acked when the request is dropped (robots,
  offsite). Live workers renew their leases; expired leases of dead workers
  are put back in the queue by any live worker;
* an idle worker polls the shared queue (FRONTIER_POLL_INTERVAL) instead of
  waiting for Scrapy's 5-second heartbeat;
* a crawl budget (CRAWL_BUDGET or ``<spider>:budget``) stops every worker
  from leasing once the cluster has taken that many requests.
"""

from __future__ import annotations

import json
import logging
import random
import time
from collections import Counter, deque
from dataclasses import dataclass

import redis
from scrapy.utils.misc import load_object
from scrapy_redis.scheduler import Scheduler
from twisted.internet import task

from crawlhub import services
from crawlhub import signals as ch_signals
from crawlhub._compat import wake_engine
from crawlhub.config import redact_url
from crawlhub.connection import connect_redis
from crawlhub.extensions.workers import workers_key
from crawlhub.frontier.dupefilter import RedisDupeFilter, make_filter
from crawlhub.frontier.leases import Frontier, Keys, Tick, domain_of, lease_domain
from crawlhub.frontier.politeness import Politeness
from crawlhub.frontier.serializer import DecodeError, EncodeError
from crawlhub.spider import worker_id

logger = logging.getLogger(__name__)

LEASE = "crawlhub_lease"  # meta: the lease id of the request being processed
ATTEMPTS = "crawlhub_attempts"  # meta: failed attempts so far
FIRST_ATTEMPT = "crawlhub_first_attempt"  # meta: time of the first attempt


@dataclass
class Lease:
    id: str
    url: str
    payload: bytes
    priority: int
    outstanding: int = 0  # items yielded and not yet through the pipelines
    downloading: bool = True  # holds one of its domain's concurrency slots
    output_done: bool = False
    error: str | None = None


class RedisScheduler(Scheduler):
    def __init__(self, crawler, server):
        settings = crawler.settings
        if not settings.getbool("SCHEDULER_PERSIST", True):
            logger.warning(
                "SCHEDULER_PERSIST=False is ignored: a closing worker never wipes the shared "
                "frontier; use `crawlhub reset SPIDER` to clear it"
            )
        if settings.getbool("SCHEDULER_FLUSH_ON_START"):
            logger.warning(
                "SCHEDULER_FLUSH_ON_START=True is ignored: a starting worker never wipes the shared "
                "frontier other workers may be crawling; use `crawlhub reset SPIDER` to clear it"
            )
        super().__init__(
            server,
            persist=True,
            queue_key=settings.get("SCHEDULER_QUEUE_KEY"),
            queue_cls=settings.get("SCHEDULER_QUEUE_CLASS"),
            dupefilter_key=settings.get("SCHEDULER_DUPEFILTER_KEY"),
            dupefilter_cls=settings.get("DUPEFILTER_CLASS"),
        )
        self.crawler = crawler
        self.stats = crawler.stats
        self.worker = worker_id()
        self.local: deque = deque()  # requests that cannot be JSON: this worker crawls them
        # sent with the next call to the frontier (one round trip for all):
        self.pending_enq: list[tuple] = []  # requests to enqueue
        self.pending_fin: list[tuple] = []  # downloads that are over (free their domain's slot)
        self.pending_ack: list[str] = []  # leases whose work is done
        self.pending_counts: Counter = Counter()  # <spider>:stats counters not sent yet
        self.prefetched: deque = deque()  # leased in the last call, not yet handed to the engine
        self.concurrency = settings.getint("CONCURRENT_REQUESTS")
        self.lease_batch = settings.getint("FRONTIER_LEASE_BATCH")
        self.leases: dict[str, Lease] = {}
        self.ready: list[str] = []  # leases whose items all reached the store's buffer
        self.wait_for_store = False
        self.budget = settings.getint("CRAWL_BUDGET")
        self.budget_exhausted = False
        self.paused = False  # `crawlhub pause SPIDER`: the frontier leases nothing
        self.lease_ttl = settings.getfloat("LEASE_TTL")
        self.max_expiries = settings.getint("LEASE_MAX_EXPIRIES")
        self.retry_times = settings.getint("RETRY_TIMES")
        self.backoff_base = settings.getfloat("RETRY_BACKOFF_BASE")
        self.backoff_max = settings.getfloat("RETRY_BACKOFF_MAX")
        self.poll_interval = settings.getfloat("FRONTIER_POLL_INTERVAL")
        self.timers: list[task.LoopingCall] = []
        self._starved = False
        self._not_before = 0.0  # monotonic time before which no domain can be ready
        self._wakeup = None
        self._last_renew = self._last_reclaim = self._last_count = 0.0
        self._redis_down = False
        self._redis_back_at = float("-inf")  # monotonic time Redis answered again after an outage (none yet)
        self.live_workers = 1  # of this spider, counted every few seconds (fair shares of domain slots)
        sig = crawler.signals
        sig.connect(self._store_opened, signal=ch_signals.store_opened)
        sig.connect(self._flush_started, signal=ch_signals.flush_started)
        sig.connect(self._flush_succeeded, signal=ch_signals.flush_succeeded)
        sig.connect(self._flush_failed, signal=ch_signals.flush_failed)
        sig.connect(self._store_backlog, signal=ch_signals.store_backlog)
        self.store_full = False

    @classmethod
    def from_crawler(cls, crawler):
        return cls(crawler, connect_redis(crawler.settings))

    # -- life cycle ----------------------------------------------------------
    def open(self, spider):
        self.spider = spider
        settings = self.crawler.settings
        self.keys = Keys.for_spider(settings, spider.name)
        self.politeness = Politeness.from_settings(self.server, settings)
        self.frontier = Frontier(
            self.server, self.keys, spider.name, self.politeness.config(), settings.getint("FRONTIER_DOMAINS_PER_LEASE"),
            dupefilter=make_filter(self.server, settings, self.keys.dupefilter),
            factor_max=self.politeness.factor_max, recovery=self.politeness.recovery,
        )
        self.queue = load_object(self.queue_cls)(
            server=self.server,
            spider=spider,
            key=self.queue_key,
            allowed_classes=settings.getlist("FRONTIER_REQUEST_CLASSES"),
            bad_max=settings.getint("FRONTIER_BAD_REQUESTS_MAX"),
            stats=self.stats,
        )
        dupefilter_cls = load_object(self.dupefilter_cls)
        if issubclass(dupefilter_cls, RedisDupeFilter):
            self.df = dupefilter_cls.for_spider(self.crawler, self.server, spider)
        else:
            self.df = dupefilter_cls.from_spider(spider)
        for interval, func in ((self.poll_interval, self._poll), (settings.getfloat("LEASE_MAINTENANCE_INTERVAL"), self._maintain)):
            if interval > 0:
                timer = task.LoopingCall(func)
                timer.start(interval, now=False)
                self.timers.append(timer)
        url = services.redis_url(settings)
        seeds_key = settings.get("REDIS_START_URLS_KEY", "%(name)s:start_urls") % {"name": spider.name}
        logger.info("Shared frontier on Redis %s%s; seed it with: %s", redact_url(url),
                    "" if settings.get("REDIS_URL") else " (embedded)", services.seed_command(url, seeds_key))
        counts = self.frontier.counts()
        if counts["queued"] or counts["inflight"] or counts["delayed"]:
            logger.info("Joining a crawl in progress: %(queued)d queued, %(inflight)d in flight, %(delayed)d waiting to retry", counts, extra={"spider": spider})

    def close(self, reason):
        """Give back what this worker still holds; never flush the shared frontier."""
        for timer in self.timers:
            if timer.running:
                timer.stop()
        if self._wakeup is not None and self._wakeup.active():
            self._wakeup.cancel()
        self.flush()
        try:
            self._send_counts()
        except redis.RedisError as exc:
            logger.warning("Could not send %d counters to Redis at close: %s", sum(self.pending_counts.values()), exc)
        returned = 0
        for lease in list(self.leases.values()):
            try:
                returned += self.frontier.requeue(lease.id, lease.payload, lease.priority)
            except redis.RedisError as exc:
                logger.error("Could not give lease %s (%s) back: %s; it returns when it expires", lease.id, lease.url, exc)
        if returned:
            logger.info("Gave %d unfinished requests back to the shared queue", returned)
        self.leases.clear()
        if self.local:
            logger.error(
                "Closing with %d requests that could not be stored as JSON, still pending: %s",
                len(self.local), [r.url for r in list(self.local)[:10]],
            )
        if self.budget_exhausted:
            left = self.frontier.counts()
            logger.info("Crawl budget used up; left in the frontier: %(queued)d queued, %(delayed)d waiting to retry", left)

    # -- enqueue ---------------------------------------------------------------
    def enqueue_request(self, request):
        ends = self._derived_from(request)
        try:
            payload = self.queue.serializer.encode(request)
        except EncodeError as exc:
            logger.warning("%s; keeping it in this worker's memory instead (crawled by this worker only, "
                           "lost if it dies)", exc, extra={"spider": self.spider})
            self.stats.inc_value("scheduler/unserializable")
            self.local.append(request)
            if ends:
                self.ack([ends])
            return True
        fp = self.df.request_fingerprint(request)
        # sent with the next call to the frontier: a page's links go in one round
        # trip, always before the page's own lease ends (same call, enqueues first)
        self.pending_enq.append((fp, payload, request.priority, request.dont_filter, ends, domain_of(request.url)))
        self._not_before = 0.0  # its domain may be ready now
        return True

    def flush(self, n: int = 0) -> Tick | None:
        """One round trip: send what is pending (enqueues, finished downloads, acks) and take up to n requests.

        What could not be sent (Redis down) stays pending for the next call.
        """
        enq, fin, ack = self.pending_enq, self.pending_fin, self.pending_ack
        if not (enq or fin or ack or n):
            return None
        self.pending_enq, self.pending_fin, self.pending_ack = [], [], []
        try:
            result = self.frontier.tick(enq, fin, ack, n, self.worker, self.lease_ttl, self.budget,
                                        self.live_workers, self._held() if n and self.live_workers > 1 else None)
        except redis.RedisError as exc:
            logger.warning("Redis unavailable (%s): %d enqueues and %d acks held until it is back", exc, len(enq), len(ack))
            self.pending_enq[:0], self.pending_fin[:0], self.pending_ack[:0] = enq, fin, ack
            self._redis_down = True
            return None
        if self._redis_down:  # back: renew at once, and reclaim nobody's leases for a LEASE_TTL
            self._redis_down, self._redis_back_at, self._last_renew = False, time.monotonic(), 0.0
        if enq:
            self.stats.inc_value("scheduler/enqueued/redis", result.added)
            if len(enq) > result.added:
                self.stats.inc_value("dupefilter/filtered", len(enq) - result.added)
        if ack:
            self.stats.inc_value("leases/acked", len(ack))
        return result

    def _held(self) -> dict[str, int]:
        """Domain slots this worker holds (leases still downloading), for its fair share of each domain."""
        return dict(Counter(lease_domain(lease.id) for lease in self.leases.values() if lease.downloading))

    def _count_live_workers(self) -> None:
        """Live workers of this spider (heartbeats), so that a domain's slots are shared among them."""
        now = time.time()
        heartbeat = self.crawler.settings.getfloat("WORKER_HEARTBEAT_INTERVAL") or 5.0
        dead_after = self.crawler.settings.getfloat("WORKER_DEAD_AFTER") or 3 * heartbeat
        alive = 0
        for raw in self.server.hvals(workers_key(self.spider.name)):
            try:
                record = json.loads(raw)
            except ValueError:
                continue
            alive += record.get("state") == "running" and now - record.get("last_beat", 0) <= dead_after
        self.live_workers = max(1, alive)

    def _derived_from(self, request) -> str:
        """The lease a redirect ends ('' if none); strips lease meta copied into children."""
        lease_id = request.meta.pop(LEASE, None)
        if lease_id is None:
            return ""
        lease = self.leases.get(lease_id)
        redirected_from = (request.meta.get("redirect_urls") or [None])[-1]
        same_page = request.meta.pop("crawlhub_same_page", False)  # e.g. the browser fallback
        if lease is not None and (redirected_from == lease.url or (same_page and request.url == lease.url)):
            del self.leases[lease_id]
            return lease_id
        # a child request that copied its parent's meta: it is a new request
        request.meta.pop(ATTEMPTS, None)
        request.meta.pop(FIRST_ATTEMPT, None)
        return ""

    # -- lease -------------------------------------------------------------------
    def next_request(self):
        if self.local:
            return self.local.popleft()
        if self.prefetched:
            return self.prefetched.popleft()
        early = self._not_before - time.monotonic()
        if self.budget_exhausted or self.store_full or early > 0:
            if self.pending_enq or self.pending_fin or self.pending_ack:
                self.flush()
            if early > 0:  # asked before a domain can be ready (or a timer fired a hair early): ask again then
                self._wake_in(early)
            return None
        result = self.flush(self._room())
        if result is None:
            return None
        if result.budget_exhausted:
            self.budget_exhausted = True
            logger.info("The crawl budget is used up: this worker takes no more requests")
            return None
        if result.paused != self.paused:
            self.paused = result.paused
            logger.info("%s is %s", self.spider.name, "paused (`crawlhub resume` to go on): taking no requests"
                        if self.paused else "resumed")
        if result.paused:
            self._sleep(self.poll_interval or 1.0)  # stays up; asks again after FRONTIER_POLL_INTERVAL
            return None
        for lease_id, payload in result.taken:
            try:
                request = self.queue.serializer.decode(payload)
            except DecodeError as exc:
                self.queue.set_aside(payload, str(exc))
                self.pending_ack.append(lease_id)
                continue
            request.meta[LEASE] = lease_id
            self.leases[lease_id] = Lease(lease_id, request.url, payload, request.priority)
            self.prefetched.append(request)
        if not self.prefetched:
            self._starved = True
            self._sleep(result.wait)
            return None
        self.stats.inc_value("scheduler/dequeued/redis", len(self.prefetched))
        self._starved = False
        return self.prefetched.popleft()

    def _room(self) -> int:
        """Requests to lease at once: the downloader's free slots (at most FRONTIER_LEASE_BATCH)."""
        engine = self.crawler.engine
        active = len(engine.downloader.active) if engine is not None and engine.downloader is not None else 0
        return max(1, min(self.concurrency - active, self.lease_batch))

    def has_pending_requests(self):
        if self.local or self.prefetched or self.pending_enq:
            return True
        if self.budget_exhausted:
            return False
        try:
            return self.frontier.pending()
        except redis.RedisError:
            return True  # unknown: do not let the worker close on a Redis hiccup

    def download_finished(self, request, status: int | None, retry_after: float = 0.0) -> None:
        """A download is over: its domain's concurrency slot frees with the next call to the
        frontier; a slow-down (429/503) is sent at once, so every worker slows down now."""
        lease_id = request.meta.get(LEASE) or ""
        domain = lease_domain(lease_id) or domain_of(request.url)
        if lease_id in self.leases:
            self.leases[lease_id].downloading = False
        outcome = self.politeness.outcome(status)
        if outcome != "slow":
            if lease_id or outcome:
                self.pending_fin.append((domain, lease_id, outcome, retry_after))
            return
        try:
            factor = self.frontier.finish(domain, lease_id, outcome, retry_after)
        except redis.RedisError as exc:
            logger.warning("Redis unavailable (%s): the slow-down of %s is held until it is back", exc, domain)
            self.pending_fin.append((domain, lease_id, outcome, retry_after))
            return
        self.stats.inc_value(f"politeness/slowdown/{domain}")
        logger.info(
            "%s answered %s: every worker slows down on %s (factor %g%s)",
            request.url, status, domain, factor, f", none before {retry_after:g}s" if retry_after else "",
        )

    # -- how a lease ends ----------------------------------------------------------
    def lease_of(self, request) -> Lease | None:
        lease_id = request.meta.get(LEASE) if request is not None else None
        return self.leases.get(lease_id) if lease_id else None

    def item_emitted(self, response) -> None:
        lease = self.lease_of(getattr(response, "request", None))
        if lease is not None:
            lease.outstanding += 1

    def item_finished(self, response) -> None:
        lease = self.lease_of(getattr(response, "request", None))
        if lease is not None:
            lease.outstanding -= 1
            self._maybe_done(lease)

    def output_finished(self, response, error: BaseException | None = None) -> None:
        lease = self.lease_of(getattr(response, "request", None))
        if lease is not None:
            lease.output_done = True
            if error is not None:
                lease.error = f"callback error: {type(error).__name__}: {error}"[:1000]
            self._maybe_done(lease)

    def _maybe_done(self, lease: Lease) -> None:
        if not lease.output_done or lease.outstanding > 0:
            return
        if self.wait_for_store:
            self.ready.append(lease.id)  # ended after the store's next flush
        else:
            self._end([lease.id])

    def _end(self, lease_ids) -> None:
        """End leases whose items are stored: ack, or dead-letter if the callback failed."""
        done = []
        for lease_id in lease_ids:
            lease = self.leases.get(lease_id)
            if lease is not None and lease.error:
                self._dead_letter(lease, json.loads(lease.payload).get("meta", {}), lease.error)
            else:
                self.leases.pop(lease_id, None)
                done.append(lease_id)
        self.ack(done)

    def dropped(self, request, reason: str) -> None:
        """The request will not be fetched (robots, offsite...): its lease ends."""
        lease = self.lease_of(request)
        if lease is not None:
            self.leases.pop(lease.id, None)
            self.ack([lease.id])
            self.stats.inc_value("leases/dropped")
            logger.debug("Dropped %s: %s", request.url, reason)

    def ack(self, lease_ids) -> None:
        """Acks go with the next call to the frontier (the poller sends them when the worker is idle)."""
        self.pending_ack.extend(lease_ids)

    def retry(self, request, reason: str, retry_after: float = 0.0, status: int | None = None) -> str | None:
        """Send the request back through the shared frontier after a backoff, or to the DLQ.

        Returns "retry", "dlq", or None when the request holds no lease of ours.
        """
        lease = self.lease_of(request)
        if lease is None:
            return None
        self.flush()
        attempts = request.meta.get(ATTEMPTS, 0) + 1
        if attempts > self.retry_times:
            self.dead_letter(request, error=reason, status=status, attempts=attempts)
            return "dlq"
        delay = min(self.backoff_max, self.backoff_base * 2 ** (attempts - 1)) * random.uniform(0.5, 1.0)
        delay = max(delay, retry_after)
        again = request.replace(dont_filter=True)
        again.meta.pop(LEASE, None)
        again.meta[ATTEMPTS] = attempts
        again.meta.setdefault(FIRST_ATTEMPT, time.time())
        self.leases.pop(lease.id, None)
        if self.frontier.delay(lease.id, self.queue.serializer.encode(again), delay):
            self.stats.inc_value("retry/count")
            self.stats.inc_value(f"retry/reason_count/{reason.split(':')[0]}")
            self.count("retries")
            logger.info("Retrying %s in %.1fs (attempt %d of %d): %s", request.url, delay, attempts + 1, self.retry_times + 1, reason)
        return "retry"

    def postpone(self, request, seconds: float, reason: str) -> bool:
        """Put the request back for later without counting an attempt (its site is not ready)."""
        lease = self.lease_of(request)
        if lease is None:
            return False
        self.flush()
        later = request.replace(dont_filter=True)
        later.meta.pop(LEASE, None)
        later.meta.pop("crawlhub_reslot", None)
        self.leases.pop(lease.id, None)
        moved = self.frontier.delay(lease.id, self.queue.serializer.encode(later), seconds)
        if moved:
            self.stats.inc_value("scheduler/postponed")
            logger.info("Postponed %s for %.0fs: %s", request.url, seconds, reason)
        return moved

    def dead_letter(self, request, error: str, status: int | None = None, attempts: int | None = None) -> None:
        lease = self.lease_of(request)
        if lease is not None:
            self._dead_letter(lease, request.meta, error, status, attempts)

    def _dead_letter(self, lease: Lease, meta: dict, error: str, status=None, attempts=None) -> None:
        self.leases.pop(lease.id, None)
        self.flush()  # the page's links are queued before its lease ends
        now = time.time()
        record = {
            "url": lease.url,
            "spider": self.spider.name,
            "attempts": attempts if attempts is not None else meta.get(ATTEMPTS, 0) + 1,
            "status": status,
            "error": error,
            "first_attempt": meta.get(FIRST_ATTEMPT, now),
            "last_attempt": now,
            "worker": self.worker,
            "request": lease.payload.decode(),
        }
        if self.frontier.dead_letter(lease.id, record):
            self.stats.inc_value("dlq/count")
            logger.error("Gave up on %s after %d attempts (%s); in %s", lease.url, record["attempts"], error, self.keys.dlq)

    def permanent_failure(self, request, status: int) -> None:
        if self.lease_of(request) is None:  # robots.txt and other side requests do not count
            return
        domain = domain_of(request.url)
        self.stats.inc_value(f"permanent_failures/{domain}")
        self.count(f"permanent_failures:{domain}")

    def count(self, field: str, n: int = 1) -> None:
        """Add ``n`` to ``field`` of ``<spider>:stats``: sent with the next upkeep (held while Redis is down)."""
        self.pending_counts[field] += n

    def _send_counts(self) -> None:
        counts, self.pending_counts = self.pending_counts, Counter()
        if not counts:
            return
        try:
            pipe = self.server.pipeline(transaction=False)
            for field, n in counts.items():
                pipe.hincrby(self.keys.stats, field, n)
            pipe.execute()
        except redis.RedisError:
            self.pending_counts.update(counts)  # sent when Redis is back
            raise

    # -- the store's flushes -------------------------------------------------------
    def _store_opened(self, **kwargs):
        self.wait_for_store = True

    def _flush_started(self, **kwargs):
        tokens, self.ready = self.ready, []
        return tokens

    def _flush_succeeded(self, tokens, **kwargs):
        self._end(tokens)

    def _flush_failed(self, tokens, **kwargs):
        self.ready[:0] = tokens

    def _store_backlog(self, full, **kwargs):
        self.store_full = full
        if not full:
            self._starved = True  # let the poller wake the engine

    # -- timers ------------------------------------------------------------------
    def _poll(self) -> None:
        """Wake the engine when other workers queued requests while this one starved.

        Scrapy asks an idle scheduler again only on its 5-second heartbeat; on
        a shared frontier that leaves workers idle while others push work.
        (``crawlhub._compat.wake_engine``: a private API of Scrapy's; without
        it, the heartbeat still works.)
        """
        if self.pending_enq or self.pending_fin or self.pending_ack:
            self.flush()
        if not self._starved or self.budget_exhausted or time.monotonic() < self._not_before:
            return
        try:
            pending = self.has_pending_requests()
        except Exception as exc:  # noqa: BLE001 - a timer must not die
            logger.debug("frontier poll failed: %s", exc)
            return
        if pending:
            self._wake()

    def _wake(self) -> None:
        if wake_engine(self.crawler):
            self._starved = False

    def _sleep(self, wait: float | None) -> None:
        """Nothing could be leased: ask again when the frontier says a domain is ready.

        ``wait`` comes from the lease script (None: nothing queued or delayed,
        the poller watches). The sleep is capped at FRONTIER_POLL_INTERVAL so
        work that other workers queue for other domains is seen soon; the
        worker sends Redis nothing while it sleeps.
        """
        if wait is None:
            self._not_before = 0.0
            return
        wait = min(wait, self.poll_interval or 1.0)
        self._not_before = time.monotonic() + wait
        self._wake_in(wait)

    def _wake_in(self, seconds: float) -> None:
        """Wake the engine in ``seconds`` (unless a wake-up is already due).

        Without this, the engine would ask again only on its 5-second heartbeat.
        """
        if self._wakeup is None or not self._wakeup.active():
            from twisted.internet import reactor

            # a hair later than asked: a timer that fires early would find nothing ready yet
            self._wakeup = reactor.callLater(max(seconds, 0.0) + 0.002, self._wake)

    def _maintain(self) -> None:
        """Renew this worker's leases; reclaim dead workers' expired leases; retry held writes."""
        now = time.monotonic()
        try:
            self.flush()
            self._send_counts()
            if now - self._last_renew >= self.lease_ttl / 3:
                self._last_renew = now
                lost = self.frontier.renew(self.leases, self.lease_ttl)
                if lost:
                    self.stats.inc_value("leases/lost", len(lost))
                    logger.warning("%d leases expired before this worker renewed them (they may be crawled twice)", len(lost))
            if now - self._last_count >= 2.0:
                self._last_count = now
                self._count_live_workers()
            if now - self._last_reclaim >= self.crawler.settings.getfloat("LEASE_RECLAIM_INTERVAL"):
                self._last_reclaim = now
                self.reclaim()
        except redis.RedisError as exc:
            self._redis_down = True
            logger.warning("Lease maintenance skipped: Redis unavailable (%s)", exc)
        except Exception:  # noqa: BLE001 - a timer must not die
            logger.exception("Lease maintenance failed")

    def reclaim(self) -> int:
        """Put expired leases (their worker died) back in the queue, counting an attempt.

        Not while Redis has been up, or reachable from this worker, for less than LEASE_TTL:
        after an outage every live worker's leases look expired until it has renewed them.
        """
        k = self.keys
        if time.monotonic() - self._redis_back_at < self.lease_ttl:
            return 0
        if int(self.server.info("server").get("uptime_in_seconds", 0)) < self.lease_ttl:
            return 0
        if not self.server.set(k.reclaim_lock, self.worker, nx=True, px=int(self.lease_ttl * 1000)):
            return 0
        reclaimed = 0
        try:
            for lease_id, owner, taken, payload in self.frontier.expired():
                if lease_id in self.leases:  # ours, and alive: renew missed, keep it
                    continue
                try:
                    data = json.loads(payload)
                except ValueError:
                    self.ack([lease_id])
                    continue
                meta = data.setdefault("meta", {})
                meta["crawlhub_expiries"] = meta.get("crawlhub_expiries", 0) + 1
                meta[ATTEMPTS] = meta.get(ATTEMPTS, 0) + 1
                meta.setdefault(FIRST_ATTEMPT, taken)
                data["dont_filter"] = True
                new_payload = json.dumps(data, separators=(",", ":"), ensure_ascii=False).encode()
                if meta["crawlhub_expiries"] > self.max_expiries:
                    self.frontier.dead_letter(lease_id, {
                        "url": data.get("url"), "spider": self.spider.name, "attempts": meta[ATTEMPTS],
                        "status": None, "error": f"lease expired {meta['crawlhub_expiries']} times (last holder {owner})",
                        "first_attempt": meta[FIRST_ATTEMPT], "last_attempt": time.time(), "worker": owner,
                        "request": new_payload.decode(),
                    })
                elif self.frontier.requeue(lease_id, new_payload, int(data.get("priority", 0))):
                    reclaimed += 1
                    logger.info("Reclaimed %s from %s (lease expired)", data.get("url"), owner)
        finally:
            self.server.delete(k.reclaim_lock)
        if reclaimed:
            self.stats.inc_value("leases/reclaimed", reclaimed)
            self.count("reclaimed", reclaimed)
        return reclaimed
