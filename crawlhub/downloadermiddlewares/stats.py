"""ClusterStatsMiddleware (990): every download attempt, counted for the cluster and logged.

The keys, the latency histogram and the Prometheus metrics are in :mod:`crawlhub.stats`.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from typing import TYPE_CHECKING, Any

from scrapy import Spider, signals
from scrapy.crawler import Crawler
from scrapy.exceptions import NotConfigured
from scrapy.http import Request, Response
from twisted.internet import task

from crawlhub import meta
from crawlhub import signals as crawlhub_signals
from crawlhub._utils.urls import domain_of
from crawlhub.components import frontier_of
from crawlhub.connection import REDIS_ERRORS, worker_id
from crawlhub.frontier.records import text
from crawlhub.roles import PLAIN, RUNGS, split_queue
from crawlhub.stats import (
    MAX_HELD_LOG,
    STARTED,
    Metrics,
    add_counts,
    items_field,
    latency_bucket,
    log_key,
    minute_key,
    status_class,
    totals_key,
)

if TYPE_CHECKING:
    from typing_extensions import Self

logger = logging.getLogger(__name__)

class ClusterStatsMiddleware:
    """Counts every download attempt for the cluster; keeps the audit log (order 990)."""

    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler
        s = crawler.settings
        self.interval = s.getfloat("CLUSTER_STATS_INTERVAL")
        self.retention = int(s.getfloat("CLUSTER_STATS_RETENTION"))
        self.log_max = s.getint("AUDIT_LOG_MAXLEN")
        self.worker = worker_id()
        self.totals: Counter[str] = Counter()
        self.minutes: dict[int, Counter[str]] = {}
        self.entries: list[dict[str, Any]] = []
        self.dropped = 0
        self.sent_scheduler: Counter[str] = Counter()  # retry/dlq counts already sent (Scrapy stats are cumulative)
        self.hashes: dict[str, Counter[str]] = {}  # other components' counts (crawlhub.signals.stats_flushing), by key
        self.ttls: dict[str, int] = {}
        self.metrics: Metrics | None = None
        self.timer: task.LoopingCall | None = None
        self.port = s.getint("METRICS_PORT")
        self.address = s.get("METRICS_ADDRESS")
        crawler.signals.connect(self.spider_opened, signal=signals.spider_opened)
        crawler.signals.connect(self.spider_closed, signal=signals.spider_closed)
        crawler.signals.connect(self.items_stored, signal=crawlhub_signals.items_stored)
        crawler.signals.connect(self.quality_checked, signal=crawlhub_signals.quality_checked)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        if not crawler.settings.getbool("CLUSTER_STATS_ENABLED") or not crawler.settings.getbool("CRAWLHUB_SHARED", True):
            raise NotConfigured  # CLUSTER_STATS_ENABLED is off, or not a worker (shell, check...)
        return cls(crawler)

    @property
    def spider_name(self) -> str:
        spider = self.crawler.spider
        assert spider is not None  # (read while the crawl runs)
        return str(spider.name)

    # -- lifecycle ------------------------------------------------------------------
    def spider_opened(self, spider: Spider) -> None:
        if self.port:
            self.metrics = Metrics(self.port, self.address)
            self.metrics.up.labels(spider.name, self.worker).set(1)
        self.timer = timer = task.LoopingCall(self.flush)
        timer.start(self.interval, now=False)

    def spider_closed(self, spider: Spider, reason: str) -> None:
        if self.timer is not None and self.timer.running:
            self.timer.stop()
        self.flush()
        if self.metrics is not None:
            self.metrics.up.labels(spider.name, self.worker).set(0)
            self.metrics.close()

    # -- counting ---------------------------------------------------------------------
    def _count(self, fields: dict[str, int], at: float | None = None) -> None:
        minute = int((at or time.time()) // 60)
        bucket = self.minutes.setdefault(minute, Counter())
        for k, v in fields.items():
            self.totals[k] += v
            bucket[k] += v

    def items_stored(self, count: int, epoch: str) -> None:
        """Documents stored for the first time in the frontier epoch ``epoch`` (crawlhub.signals): the crawl's
        ``items`` are counted per epoch (``items@<epoch>``), so a write that straddles a reset counts for the
        old crawl, which status no longer shows."""
        self.totals[items_field(epoch)] += count
        if self.metrics is not None:
            self.metrics.items.labels(self.spider_name).inc(count)

    def quality_checked(self, spider: str, score: float, coverage: dict[str, float], events: dict[str, int]) -> None:
        if self.metrics is not None:
            self.metrics.quality(spider, score, coverage, events)

    def _collect(self) -> None:
        """Other components' counts for this flush (crawlhub.signals.stats_flushing)."""
        for _, result in self.crawler.signals.send_catch_log(crawlhub_signals.stats_flushing):
            for key, counts, ttl in result or ():
                self.hashes.setdefault(key, Counter()).update(counts)
                self.ttls[key] = ttl

    def process_request(self, request: Request) -> Request | Response | None:
        request.meta[STARTED] = time.monotonic()
        request.meta.pop("download_latency", None)  # an earlier attempt's (a retry's, a redirect's copy of the meta)
        return None

    def process_response(self, request: Request, response: Response) -> Request | Response:
        self.record(request, response.status, len(response.body), "")
        return response

    def process_exception(self, request: Request, exception: BaseException) -> Request | Response | None:
        self.record(request, None, 0, f"{type(exception).__name__}: {str(exception).splitlines()[0] if str(exception) else ''}")
        return None

    def record(self, request: Request, status: int | None, size: int, error: str) -> None:
        ms = self.latency_ms(request, answered=status is not None)
        domain = domain_of(request.url)
        cls = status_class(status)
        bucket = latency_bucket(ms)
        d = f"d|{domain}|"
        self._count({"requests": 1, cls: 1, "bytes": size, f"lat:{bucket}": 1,
                     d + "requests": 1, d + cls: 1, d + "bytes": size, d + f"lat:{bucket}": 1})
        proxy = request.meta.get(meta.PROXY) or ""
        # one field per value: Redis stores a stream's repeated field names once (half the memory of a JSON field)
        self.entries.append({"t": f"{time.time():.3f}", "url": request.url, "domain": domain, "worker": self.worker,
                             "status": str(status or ""), "error": error[:300], "ms": f"{ms:.1f}", "bytes": str(size),
                             "proxy": proxy, "browser": "1" if request.meta.get("playwright") else "0"})
        if len(self.entries) > MAX_HELD_LOG:
            self.dropped += len(self.entries) - MAX_HELD_LOG
            del self.entries[: len(self.entries) - MAX_HELD_LOG]
        if self.metrics is not None:
            m = self.metrics
            m.requests.labels(self.spider_name, domain, cls).inc()
            m.latency.labels(self.spider_name, domain).observe(ms / 1000)
            m.bytes.labels(self.spider_name).inc(size)

    @staticmethod
    def latency_ms(request: Request, answered: bool) -> float:
        """The attempt's latency: from when its download really started (the download handler's
        ``download_latency``: Scrapy's, crawlhub's and the browser's set it), not from when the request joined its
        download slot's queue in this worker (where DOWNLOAD_DELAY and CONCURRENT_REQUESTS_PER_DOMAIN hold it);
        an attempt with no answer (a timeout, a refused connection), or through a handler that does not say: from
        when it reached this middleware."""
        started = request.meta.pop(STARTED, None)
        if started is None:
            return 0.0
        latency = request.meta.get("download_latency")
        if answered and isinstance(latency, (int, float)):
            return float(latency) * 1000
        return (time.monotonic() - float(started)) * 1000

    def _scheduler_counts(self) -> None:
        """Retries and dead letters, from the frontier's Scrapy stats (cumulative: send the growth)."""
        stats = self.crawler.stats
        for name, stat in (("retries", "retry/count"), ("dlq", "dlq/count")):
            now = stats.get_value(stat, 0) or 0
            grown = now - self.sent_scheduler[name]
            if grown > 0:
                self._count({name: grown})
                self.sent_scheduler[name] = now
                if self.metrics is not None:
                    (self.metrics.retries if name == "retries" else self.metrics.dlq).labels(self.spider_name).inc(grown)

    # -- sending ------------------------------------------------------------------------
    def flush(self) -> None:
        """Everything counted since the last flush, in one pipeline; kept for the next one if Redis is down."""
        self._scheduler_counts()
        self._collect()
        frontier = frontier_of(self.crawler)
        if frontier is None or not (self.totals or self.entries or self.metrics or self.hashes):
            return
        server, spider = frontier.server, self.spider_name
        totals, minutes, entries, hashes = self.totals, self.minutes, self.entries, self.hashes
        self.totals, self.minutes, self.entries, self.hashes = Counter(), {}, [], {}
        try:
            pipe = server.pipeline(transaction=False)
            key = totals_key(spider)
            add_counts(pipe, key, totals)
            for minute, counts in minutes.items():
                add_counts(pipe, minute_key(spider, minute), counts, self.retention)
            for hkey, counts in hashes.items():
                add_counts(pipe, hkey, counts, self.ttls.get(hkey, self.retention))
            for entry in entries:
                pipe.xadd(log_key(spider), entry, maxlen=self.log_max, approximate=True)  # type: ignore[arg-type]
            if self.dropped:
                pipe.hincrby(key, "log_dropped", self.dropped)
            if self.metrics is not None:
                for part in frontier.keys.parts:
                    pipe.hgetall(part.queued)  # (per queue: a lane's work is counted apart, crawlhub.roles)
                    pipe.llen(part.dlq)
                    pipe.zcard(part.inflight)
            out = pipe.execute()
            self.dropped = 0
            for hkey in hashes:
                self.ttls.pop(hkey, None)
            if self.metrics is not None:
                parts = frontier.keys.partitions
                gauges = out[len(out) - 3 * parts:]
                per_rung = dict.fromkeys(RUNGS, 0)
                for queued in gauges[0::3]:
                    for q, n in queued.items():
                        per_rung[split_queue(text(q))[1] or PLAIN] += int(n)
                self.metrics.queue.labels(spider).set(sum(per_rung.values()))
                for rung, n in per_rung.items():  # a role deployment scales each kind of worker on its own
                    self.metrics.lane.labels(spider, rung).set(n)
                self.metrics.dlq_size.labels(spider).set(sum(gauges[1::3]))
                self.metrics.inflight.labels(spider).set(sum(gauges[2::3]))
        except REDIS_ERRORS as exc:
            logger.warning("Redis unavailable (%s): cluster stats and %d audit entries held until it is back", exc, len(entries))
            self.totals.update(totals)
            for hkey, counts in hashes.items():
                self.hashes.setdefault(hkey, Counter()).update(counts)
            for minute, counts in minutes.items():
                self.minutes.setdefault(minute, Counter()).update(counts)
            self.entries[:0] = entries[-MAX_HELD_LOG:]
