"""Cluster stats, the audit log and Prometheus metrics, written by every worker.

Scrapy's stats live and die in one process; these live in Redis, for the
whole crawl, and are what ``crawlhub status``, ``crawlhub log`` and
``crawlhub report`` read (docs/cli.md).

``ClusterStatsMiddleware`` (downloader middleware 990, next to the download,
so it sees every attempt: retries, robots.txt, other proxies, rendered pages)
counts in memory and sends everything every ``CLUSTER_STATS_INTERVAL`` seconds
in one pipeline:

- ``<spider>:stats:totals`` (hash): counters for the whole crawl, for the
  spider and per domain (``d|<domain>|<field>``): requests, responses by
  class (2xx..5xx), errors, bytes, and a latency histogram (``lat:<ms>``
  buckets, for p50/p95); items, retries and DLQ entries for the spider.
- ``<spider>:stats:m:<minute>`` (hash, expires after ``CLUSTER_STATS_RETENTION``):
  the same counters per minute (pages/min, status classes over time).
- ``<spider>:log`` (stream, capped at ``AUDIT_LOG_MAXLEN`` entries): one entry per
  attempt: ``t`` (time), ``url``, ``domain``, ``worker``, ``status`` (empty on
  an error), ``error``, ``ms``, ``bytes``, ``proxy`` (id, never credentials),
  ``browser`` (0/1).

The number of keys is bounded: one totals hash, one hash per minute kept, one
stream, per spider; nothing per URL. With ``METRICS_PORT`` the worker also
serves Prometheus metrics (off by default).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from crawlhub import meta
from crawlhub.frontier.keys import spider_keys

logger = logging.getLogger(__name__)

# latency histogram bucket upper bounds, milliseconds ("inf" above the last)
# upper bounds; a local or cached page answers in a few ms, a far one in seconds
LATENCY_BUCKETS_MS = (2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000)
STARTED = meta.ATTEMPT_STARTED  # when this attempt went to the downloader (monotonic)
MAX_HELD_LOG = 50_000  # audit entries held while Redis is down; older ones are dropped (and counted)


def totals_key(spider: str) -> str:
    return spider_keys(spider).stats_totals


def items_field(epoch: str) -> str:
    """The totals field counting the documents stored in frontier epoch ``epoch`` (``items`` of status)."""
    return f"items@{epoch}"


def minute_key(spider: str, minute: int) -> str:
    return spider_keys(spider).minute(minute)


def log_key(spider: str) -> str:
    return spider_keys(spider).log


def add_counts(pipe: Any, key: str, counts: Mapping[str, int | float], ttl: int | None = None) -> None:
    """Queue in ``pipe`` the HINCRBYs adding ``counts`` to hash ``key``, and its expiry."""
    for field, value in counts.items():
        pipe.hincrby(key, field, value)
    if ttl is not None:
        pipe.expire(key, ttl)


def status_class(status: int | None) -> str:
    return f"{status // 100}xx" if status else "error"


def latency_bucket(ms: float) -> str:
    for bound in LATENCY_BUCKETS_MS:
        if ms <= bound:
            return str(bound)
    return "inf"


def percentile(histogram: dict[str, int], q: float) -> float | None:
    """The q-quantile (0..1) of a latency histogram, in ms: the upper bound of its bucket."""
    total = sum(histogram.values())
    if not total:
        return None
    seen = 0
    for bound in [*map(str, LATENCY_BUCKETS_MS), "inf"]:
        seen += histogram.get(bound, 0)
        if seen >= q * total:
            return float(bound) if bound != "inf" else float("inf")
    return float("inf")


class Metrics:
    """The worker's Prometheus metrics (prometheus_client, a registry of its own)."""

    def __init__(self, port: int = 0, address: str = "127.0.0.1") -> None:
        from prometheus_client import CollectorRegistry, Gauge, Histogram, start_http_server
        from prometheus_client import Counter as PCounter

        self.registry = CollectorRegistry()
        self.requests = PCounter("crawlhub_requests", "Download attempts by outcome (2xx..5xx, error)",
                                 ["spider", "domain", "status_class"], registry=self.registry)
        self.latency = Histogram("crawlhub_request_latency_seconds", "Download latency", ["spider", "domain"],
                                 buckets=[b / 1000 for b in LATENCY_BUCKETS_MS], registry=self.registry)
        self.bytes = PCounter("crawlhub_response_bytes", "Response body bytes", ["spider"], registry=self.registry)
        self.items = PCounter("crawlhub_items", "Items scraped", ["spider"], registry=self.registry)
        self.retries = PCounter("crawlhub_retries", "Retries scheduled through the frontier", ["spider"], registry=self.registry)
        self.dlq = PCounter("crawlhub_dead_letters", "Requests sent to the DLQ", ["spider"], registry=self.registry)
        self.queue = Gauge("crawlhub_queue_depth", "Requests queued in the shared frontier", ["spider"], registry=self.registry)
        self.lane = Gauge("crawlhub_lane_depth", "Requests queued for the workers of one rung (WORKER_CAPABILITIES)",
                          ["spider", "lane"], registry=self.registry)
        self.dlq_size = Gauge("crawlhub_dlq_size", "Entries in the spider's DLQ", ["spider"], registry=self.registry)
        self.inflight = Gauge("crawlhub_inflight", "Leased requests, whole cluster", ["spider"], registry=self.registry)
        self.score = Gauge("crawlhub_quality_score", "Quality score of the spider's current cycle, 0..100",
                           ["spider"], registry=self.registry)
        self.coverage = Gauge("crawlhub_field_coverage", "Share of the cycle's items with the field non-empty",
                              ["spider", "item_type", "field"], registry=self.registry)
        self.events = Gauge("crawlhub_quality_events", "Open data-quality events (docs/quality.md)",
                            ["spider", "kind"], registry=self.registry)
        self.up = Gauge("crawlhub_worker_up", "1 while this worker runs", ["spider", "worker"], registry=self.registry)
        self.server = None
        if port:
            self.server, _ = start_http_server(port, addr=address, registry=self.registry)
            logger.info("Prometheus metrics on http://%s:%d/metrics", address, port)

    def quality(self, spider: str, score: float, coverage: dict[str, float], events: dict[str, int]) -> None:
        """The gauges of the last quality check (crawlhub.signals.quality_checked)."""
        self.score.labels(spider).set(score)
        for name, value in coverage.items():
            item_type, _, field = name.partition(".")
            self.coverage.labels(spider, item_type, field).set(value)
        for kind in ("extraction", "coverage", "quarantine", "dlq"):
            self.events.labels(spider, kind).set(events.get(kind, 0))

    def close(self) -> None:
        if self.server is not None:
            self.server.shutdown()


