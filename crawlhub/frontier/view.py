"""What components may know of the shared frontier: two small typed interfaces.

Components never import the frontier client (``make lint`` holds that: an
import-linter contract in pyproject.toml). They send intent through Scrapy's
paths (crawlhub.intent, crawlhub.signals) and read the shared state through:

* :func:`frontier_of` -> :class:`FrontierView`: the shared Redis, the spider's
  key names, this worker's id, the domain limits, and what the spider's idle
  check needs; None when the crawl does not run on crawlhub's scheduler
  (``scrapy shell``, a unit test, another SCHEDULER): a component then does
  what plain Scrapy would;
* :func:`store_link_of` -> :class:`StoreLink`: the store's flush handshake (a
  page's lease ends only after its items are written).
"""

from __future__ import annotations

from collections.abc import Collection
from typing import TYPE_CHECKING, Protocol

import redis
from scrapy.crawler import Crawler

from crawlhub.frontier.client import FrontierClient
from crawlhub.frontier.operations import TOTALS

if TYPE_CHECKING:
    from crawlhub.frontier.keys import Keys
    from crawlhub.frontier.partitions import Partitions
    from crawlhub.frontier.politeness import Politeness
    from crawlhub.frontier.scheduler import RedisScheduler
    from crawlhub.roles import Roles

__all__ = ["FrontierView", "StoreLink", "frontier_of", "store_link_of"]


class FrontierView(Protocol):
    """The running crawl's shared frontier, as components see it (read, and the refresher's moves)."""

    server: redis.Redis
    worker: str
    spider_name: str
    keys: Keys
    politeness: Politeness  # the domains' limits: a request without a lease takes its slot here
    ops: Partitions  # the refresher moves due URLs into the queues with it
    budget_exhausted: bool
    work_waiting: bool  # the last round saw requests queued that were not ready yet
    roles: Roles  # the rungs this worker takes, and the live workers' (which lanes have a worker: crawlhub.roles)

    @property
    def epoch_id(self) -> str:
        """The id of the frontier epoch this worker knows (a crawl cycle: crawlhub/frontier/epoch.py)."""

    # leases live workers held at their last heartbeat, other than this one's (read with the live workers, every
    # 2 s by the upkeep): a sign that work may come back without reading every partition
    leases_elsewhere: int

    @property
    def leases_held(self) -> int:
        """Leases this worker holds now (its heartbeat says so to the others)."""

    def pending(self) -> bool:
        """Anything queued or waiting to retry in the cluster (one key when partitioned: the hints)."""

    def left(self) -> bool:
        """Anything queued, waiting to retry or in flight in the cluster, asked of every partition."""

    def counts(self, fields: Collection[str] = TOTALS) -> dict[str, int]:
        """Seeds waiting, queued, delayed, in flight, dead letters, URLs seen (``fields``: only those: a command
        a partition each)."""

    def count(self, field: str, n: int = 1) -> None:
        """Add ``n`` to ``field`` of ``<spider>:stats`` (the cluster's counters)."""


class StoreLink(Protocol):
    """The store's handshake with the frontier (MongoPipeline): a page's lease ends after its items are written."""

    def opened(self) -> None:
        """A store that acknowledges writes is in use: a done lease ends after its next flush."""

    def flush_started(self) -> list[str]:
        """A flush begins: the leases it covers (every page done before it began)."""

    def flush_succeeded(self, leases: list[str]) -> None: ...

    def flush_failed(self, leases: list[str]) -> None: ...

    def backlog(self, full: bool) -> None:
        """The store's buffer is full (the worker takes no new requests) or has drained."""


def scheduler_of(crawler: Crawler) -> RedisScheduler | None:
    """The running crawl's crawlhub scheduler, or None (for the frontier's own parts: the warden's hooks)."""
    try:
        engine = crawler.engine
    except RuntimeError:  # the crawl has not started (Scrapy sets the engine then)
        return None
    scheduler = engine.scheduler if engine is not None else None
    # (not isinstance(scheduler, RedisScheduler): Scrapy's BaseScheduler answers isinstance by duck typing)
    return scheduler if isinstance(getattr(scheduler, "frontier", None), FrontierClient) else None  # type: ignore[return-value]


def frontier_of(crawler: Crawler) -> FrontierView | None:
    """The running crawl's shared frontier, or None (not started, or not on crawlhub's scheduler)."""
    scheduler = scheduler_of(crawler)
    return scheduler.frontier if scheduler is not None else None


def store_link_of(crawler: Crawler) -> StoreLink | None:
    """The store's handshake with the running crawl's frontier, or None (as for :func:`frontier_of`)."""
    scheduler = scheduler_of(crawler)
    return scheduler.store_link if scheduler is not None else None
