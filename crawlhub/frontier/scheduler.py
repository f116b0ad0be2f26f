"""RedisScheduler: Scrapy's scheduler interface over the shared frontier.

Thin on purpose: the frontier's operations live in
:class:`~crawlhub.frontier.client.FrontierClient` (``self.frontier``, what
every other component reaches through ``frontier_of(crawler)``), its timers
in :class:`~crawlhub.frontier.upkeep.Upkeep`. What this class adds:

* ``enqueue_request``: the request's fingerprint (Scrapy's fingerprinter,
  through DUPEFILTER_CLASS), queued with the next round trip; a request that
  cannot be JSON (a lambda callback, an object in its meta) is kept in this
  worker's memory and crawled here, never lost;
* ``next_request``: this worker's free downloader slots (at most
  FRONTIER_LEASE_BATCH) leased in one round trip, handed to the engine one
  by one; nothing while the budget is used up, the store's buffer is full,
  or no domain can be ready yet; while the downloader is full with work the
  frontier had plenty of, a few free slots wait for more (``LeaseGate``);
* never a flush of the shared frontier (SCHEDULER_PERSIST and
  SCHEDULER_FLUSH_ON_START are ignored, with a warning): only ``crawlhub
  reset`` clears it. A closing worker gives back what it holds.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from typing import Any

from scrapy import Request, Spider, signals
from scrapy.core.scheduler import BaseScheduler
from scrapy.crawler import Crawler
from scrapy.dupefilters import BaseDupeFilter
from scrapy.http import Response
from scrapy.utils.defer import deferred_from_coro
from scrapy.utils.misc import build_from_crawler, load_object

from crawlhub import meta
from crawlhub.connection import (
    REDIS_ERRORS,
    connect_redis,
    redis_location,
    redis_shown,
    retry_startup,
    seed_commands,
    take_over,
    worker_id,
)
from crawlhub.frontier.client import FrontierClient
from crawlhub.frontier.dupefilter import RedisDupeFilter
from crawlhub.frontier.serializer import EncodeError
from crawlhub.frontier.store_link import LeaseStoreLink
from crawlhub.frontier.upkeep import Upkeep
from crawlhub.frontier.warden import LeaseWarden

logger = logging.getLogger(__name__)


class LeaseGate:
    """When to lease a few free slots or wait for more (FRONTIER_LEASE_MIN, FRONTIER_LEASE_LINGER).

    A round costs Redis a fixed few hundred microseconds (the script call, its header, a server woken from
    idle) besides its work per page, and a worker whose downloads end a few at a time would pay it for a
    request or two each time. While the last round gave all it was asked for (the downloader, not the
    frontier, is the limit) and downloads are running, fewer than ``least`` free slots wait for more: at
    most ``linger`` seconds, and at most a tenth of the downloads' mean latency, so that the slots stand
    idle for no more than about 5% of their time. Never otherwise: an idle downloader, or a frontier that
    had less than asked (politeness, a crawl's tail), leases at once, so a domain's pace is never late."""

    SHARE = 0.1  # of the mean download latency: the longest free slots wait

    def __init__(self, least: int, linger: float):
        self.least, self.linger = least, linger
        self.slot_bound = False  # the last round gave as many requests as asked for
        self.since: float | None = None  # when free slots were first held
        self.latency = 0.0  # the downloads' mean latency (exponentially weighted), 0 = none seen yet

    def observe(self, latency: float) -> None:
        self.latency = latency if not self.latency else 0.9 * self.latency + 0.1 * latency

    def wait(self, room: int, active: int, now: float) -> float:
        """Seconds to wait before leasing ``room`` slots (0: lease now)."""
        linger = min(self.linger, self.SHARE * self.latency)
        if room >= self.least or active == 0 or not self.slot_bound or linger <= 0:
            self.since = None
            return 0.0
        if self.since is None:
            self.since = now
        left = self.since + linger - now
        if left <= 0:
            self.since = None
            return 0.0
        return left

    def leased(self, asked: int, got: int) -> None:
        self.slot_bound = got >= asked


class RedisScheduler(BaseScheduler):
    def __init__(self, crawler: Crawler, frontier: FrontierClient):
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
        self.crawler = crawler
        self.frontier = frontier
        self.stats = crawler.stats
        self.local: deque[Request] = deque()  # requests that cannot be JSON: this worker crawls them
        self.prefetched: deque[Request] = deque()  # leased in the last call, not yet handed to the engine
        # the one owner of every lease's end (signals, and a sweep for what no hook saw)
        self.warden = LeaseWarden(crawler, frontier, lambda: self.prefetched)
        # the store's flush handshake (crawlhub.frontier.view.StoreLink): a page's lease ends after its items are written
        self.store_link = LeaseStoreLink(frontier.leases, frontier.ends.finish)
        self.upkeep = Upkeep(crawler, frontier, self.has_pending_requests, self.warden.sweep, self.store_link.on_drained)
        frontier.on_lost.append(self._frontier_lost)
        crawler.signals.connect(self._downloaded, signal=signals.response_received)
        self.concurrency = settings.getint("CONCURRENT_REQUESTS")
        self.lease_batch = settings.getint("FRONTIER_LEASE_BATCH")
        ahead = settings.getint("FRONTIER_LEASE_AHEAD", -1)
        self.lease_ahead = max(0, self.concurrency if ahead < 0 else ahead)
        self.gate = LeaseGate(min(settings.getint("FRONTIER_LEASE_MIN", 1), self.concurrency, self.lease_batch),
                              settings.getfloat("FRONTIER_LEASE_LINGER", 0.0))

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> RedisScheduler:
        # the client `scrapy crawl`'s checks connected, if its settings are the crawler's (one connection per node)
        server = take_over(crawler) or connect_redis(crawler.settings, crawler.stats)
        return cls(crawler, FrontierClient(server, crawler.settings, crawler.stats, worker_id(), crawler.signals))

    @property
    def server(self) -> Any:
        return self.frontier.server

    # -- life cycle ----------------------------------------------------------
    def _open_frontier(self, spider: Spider) -> None:
        """The frontier's first reads and writes (its layout, the live workers' rungs). Redis answered when the
        worker connected, but may not a few seconds later (a restart, a cluster briefly down while a node is
        marked failing): tried again, saying so, until REDIS_STARTUP_WAIT is over; then one line of reason."""
        wait = self.crawler.settings.getfloat("REDIS_STARTUP_WAIT", 30)
        retry_startup(self.crawler.settings, "Redis failed while the frontier opened",
                      f"Redis failed while the frontier opened, for {wait:.0f}s (REDIS_STARTUP_WAIT)",
                      lambda: self.frontier.open(spider))

    def open(self, spider: Spider) -> None:
        self.spider = spider
        settings = self.crawler.settings
        self._open_frontier(spider)
        dupefilter_cls = load_object(settings["DUPEFILTER_CLASS"])
        if issubclass(dupefilter_cls, RedisDupeFilter):
            self.df: BaseDupeFilter = dupefilter_cls.for_spider(self.crawler, spider)
        else:
            self.df = build_from_crawler(dupefilter_cls, self.crawler)
        self.upkeep.start()
        url, cluster = redis_location(settings)  # a cluster worker must not start an embedded Redis to say where
        logger.info("Shared frontier on %s; seed it with: %s", redis_shown(settings, url, cluster),
                    seed_commands(settings, spider.name, self.frontier.keys.seeds))
        counts: dict[str, int] = {}
        if not self.frontier.fresh:  # a crawl in progress counted, else the URLs seen (a command a partition each)
            joining = self.frontier.left()
            counts = self.frontier.counts(("queued", "inflight", "delayed") if joining else ("seen",))
        if counts.get("queued") or counts.get("inflight") or counts.get("delayed"):
            logger.info("Joining a crawl in progress: %(queued)d queued, %(inflight)d in flight, %(delayed)d waiting to retry",
                        counts, extra={"spider": spider})
        elif counts.get("seen"):  # a finished crawl run again: its URLs are duplicates now, say so before it looks lost
            logger.info("This crawl has already seen %d URLs (its shared duplicate filter remembers them across runs): "
                        "their requests are dropped as duplicates; `crawlhub reset %s` starts a new crawl",
                        counts["seen"], spider.name, extra={"spider": spider})

    def _frontier_lost(self, why: str) -> None:
        """The shared frontier vanished: this worker's crawl ends as "frontier_lost", never as "finished"."""
        engine = self.crawler.engine
        if engine is not None:
            deferred_from_coro(engine.close_spider_async(reason="frontier_lost"))

    def close(self, reason: str) -> None:
        """Give back what this worker still holds; never flush the shared frontier."""
        self.upkeep.stop()
        self.warden.sweep()  # a lease whose request already left Scrapy ends as it should, not given back
        self.frontier.close()
        dropped = self.stats.get_value("dupefilter/filtered", 0)
        if dropped:
            logger.info("The shared duplicate filter dropped %d requests to URLs this crawl had already seen (in this run "
                        "or an earlier one: it remembers every URL until `crawlhub reset %s`)", dropped, self.spider.name)
        if self.local:
            logger.error(
                "Closing with %d requests that could not be stored as JSON, still pending: %s",
                len(self.local), [r.url for r in list(self.local)[:10]],
            )

    # -- Scrapy's scheduler interface ------------------------------------------
    def enqueue_request(self, request: Request) -> bool:
        if meta.END in request.meta:  # a component's decision on a leased request (crawlhub.intent)
            self.frontier.ends.end(request)
            return True
        try:
            self.frontier.enqueue(request, self._fingerprint(request))
        except EncodeError as exc:
            logger.warning("%s; keeping it in this worker's memory instead (crawled by this worker only, "
                           "lost if it dies)", exc, extra={"spider": self.spider})
            self.stats.inc_value("scheduler/unserializable")
            self.local.append(request)
            return True
        self.upkeep.work_arrived()
        return True

    def _fingerprint(self, request: Request) -> str:
        """The request's fingerprint: DUPEFILTER_CLASS's if it has one, else REQUEST_FINGERPRINTER's."""
        own = getattr(self.df, "request_fingerprint", None)
        if own is not None:
            return str(own(request))
        return self.crawler.request_fingerprinter.fingerprint(request).hex()

    def next_request(self) -> Request | None:
        if self.local:
            return self.local.popleft()
        if self.prefetched:
            return self.prefetched.popleft()
        frontier, upkeep = self.frontier, self.upkeep
        early = upkeep.early()
        if frontier.budget_exhausted or self.store_link.full or early > 0:
            if frontier.has_pending_writes:
                frontier.flush()
            if early > 0:  # asked before a domain can be ready (or a timer fired a hair early): ask again then
                upkeep.wake_in(early)
            return None
        room, active = self._room()
        hold = self.gate.wait(room, active, time.monotonic())
        if hold > 0:  # the downloader is busy with plenty of work: a few free slots wait for more
            upkeep.nudge_in(hold)
            return None
        # while the downloader is the limit, a round also leases ahead from domains with no pace and no cap: the
        # surplus waits here for free slots, and the next round comes after it (fewer rounds: each costs Redis a
        # few hundred microseconds besides its pages). Never when the frontier had less than asked (a crawl's
        # tail: the work goes to whichever worker asks).
        ahead = self.lease_ahead if self.gate.slot_bound else 0
        requests, result = frontier.lease(room, ahead)
        self.gate.leased(room, len(requests))
        if len(requests) > room:
            self.stats.inc_value("frontier/leased_ahead", len(requests) - room)
        if result is None or result.budget_exhausted:
            return None
        if result.paused:
            upkeep.sleep(upkeep.poll_interval or 1.0)  # stays up; asks again after FRONTIER_POLL_INTERVAL
            return None
        if not requests:
            upkeep.starved = True
            upkeep.sleep(result.wait)
            return None
        self.prefetched.extend(requests)
        upkeep.starved = False
        return self.prefetched.popleft()

    def _downloaded(self, response: Response, request: Request, spider: Spider) -> None:
        latency = request.meta.get("download_latency")
        if isinstance(latency, (int, float)):
            self.gate.observe(float(latency))

    def _room(self) -> tuple[int, int]:
        """Requests to lease at once: the downloader's free slots (at most FRONTIER_LEASE_BATCH); and its downloads."""
        engine = self.crawler.engine
        active = len(engine.downloader.active) if engine is not None and engine.downloader is not None else 0
        return max(1, min(self.concurrency - active, self.lease_batch)), active

    def has_pending_requests(self) -> bool:
        if self.local or self.prefetched or self.frontier.pending_enq or self.frontier.ops.holding:
            return True
        if self.frontier.budget_exhausted:
            return False
        if self.upkeep.starved and self.upkeep.early() > 0:
            # the frontier said nothing is ready for this worker before then (rate limits, back-offs, concurrency
            # caps): idle till then, so that the engine's spider_idle reads new seeds meanwhile (the spider stays
            # open: work is waiting). Else a seed pushed while every queued domain waits would wait with them.
            return False
        try:
            return self.frontier.pending()
        except REDIS_ERRORS:
            return True  # unknown: do not let the worker close on a Redis hiccup

    def __len__(self) -> int:
        return len(self.local) + len(self.prefetched)
