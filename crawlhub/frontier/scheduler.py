"""The shared scheduler: scrapy-redis's, adapted to Scrapy 2.19 and to JSON.

What differs from ``scrapy_redis.scheduler.Scheduler``:

* built with ``from_crawler`` only, on crawlhub's Redis client (REDIS_URL or the
  embedded server), with stats calls that do not pass ``spider=``;
* the queue is :class:`~crawlhub.frontier.queue.JsonPriorityQueue` (JSON, an
  allowlist of request classes, bad payloads set aside);
* the queue and duplicate filter are never flushed by a worker: closing one
  worker must not wipe the crawl the others share (``crawlhub reset`` does);
* requests with dont_filter (seeds) are crawled but still recorded as seen;
* a request that cannot be written as JSON is kept in a local in-memory queue
  and crawled by this worker (as Scrapy does when its disk queue cannot take a
  request), with a logged error, instead of being lost.
"""

from __future__ import annotations

import logging
from collections import deque

from scrapy.utils.misc import load_object
from twisted.internet import task
from scrapy_redis.scheduler import Scheduler

from crawlhub.connection import connect_redis
from crawlhub.frontier.dupefilter import RedisDupeFilter
from crawlhub.frontier.serializer import EncodeError

logger = logging.getLogger(__name__)


class RedisScheduler(Scheduler):
    def __init__(self, crawler, server):
        settings = crawler.settings
        if not settings.getbool("SCHEDULER_PERSIST", True):
            logger.warning(
                "SCHEDULER_PERSIST=False is ignored: a closing worker never wipes the shared "
                "frontier; use `crawlhub reset SPIDER` to clear it"
            )
        super().__init__(
            server,
            persist=True,
            flush_on_start=False,
            queue_key=settings.get("SCHEDULER_QUEUE_KEY"),
            queue_cls=settings.get("SCHEDULER_QUEUE_CLASS"),
            dupefilter_key=settings.get("SCHEDULER_DUPEFILTER_KEY"),
            dupefilter_cls=settings.get("DUPEFILTER_CLASS"),
            idle_before_close=0,
        )
        self.crawler = crawler
        self.stats = crawler.stats
        self.local: deque = deque()
        self.poll_interval = settings.getfloat("FRONTIER_POLL_INTERVAL")
        self.poller: task.LoopingCall | None = None
        self._starved = False

    @classmethod
    def from_crawler(cls, crawler):
        return cls(crawler, connect_redis(crawler.settings))

    def open(self, spider):
        self.spider = spider
        settings = self.crawler.settings
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
        if self.poll_interval > 0:
            self.poller = task.LoopingCall(self._poll)
            self.poller.start(self.poll_interval, now=False)
        pending = len(self.queue)
        if pending:
            logger.info("Resuming crawl (%d requests in %s)", pending, self.queue.key, extra={"spider": spider})

    def _poll(self) -> None:
        """Wake the engine when other workers queued requests while this one starved.

        Scrapy asks an idle scheduler again only on its 5-second heartbeat;
        on a shared frontier that leaves workers idle while others push work.
        """
        if not self._starved:
            return
        try:
            pending = len(self.queue)
        except Exception as exc:  # Redis hiccup: the heartbeat will retry
            logger.debug("frontier poll failed: %s", exc)
            return
        slot = getattr(self.crawler.engine, "_slot", None)
        if pending and slot is not None:
            self._starved = False
            slot.nextcall.schedule()

    def close(self, reason):
        """Never flush: the frontier is shared with the other workers."""
        if self.poller is not None and self.poller.running:
            self.poller.stop()
        if self.local:
            logger.error(
                "Closing with %d requests that could not be stored as JSON, crawled by this worker "
                "only, still pending: %s", len(self.local), [r.url for r in list(self.local)[:10]],
            )

    def enqueue_request(self, request):
        # dont_filter requests (seeds) are recorded too, so that a link back
        # to a seed is not crawled a second time.
        seen = self.df.request_seen(request)
        if seen and not request.dont_filter:
            self.df.log(request, self.spider)
            return False
        try:
            self.queue.push(request)
        except EncodeError as exc:
            logger.error("%s; keeping it in this worker's memory instead", exc, extra={"spider": self.spider})
            self.stats.inc_value("scheduler/unserializable")
            self.local.append(request)
            return True
        self.stats.inc_value("scheduler/enqueued/redis")
        return True

    def next_request(self):
        if self.local:
            return self.local.popleft()
        request = self.queue.pop()
        if request is not None:
            self.stats.inc_value("scheduler/dequeued/redis")
        self._starved = request is None
        return request

    def has_pending_requests(self):
        return bool(self.local) or len(self.queue) > 0
