"""What components share: how they reach the frontier, and one choice for the whole cluster.

A component (middleware, pipeline, extension) reads the shared frontier
through :func:`crawlhub.frontier.view.frontier_of` (re-exported here):
``frontier_of(crawler)`` is the running crawl's
:class:`~crawlhub.frontier.view.FrontierView`, or None when the crawl does
not run on crawlhub's scheduler; a component then does what plain Scrapy
would. It never calls the frontier client: it sends intent
(crawlhub.intent, crawlhub.signals).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

import redis
from scrapy.crawler import Crawler

from crawlhub.connection import REDIS_ERRORS, get_redis
from crawlhub.frontier.view import FrontierView, frontier_of

if TYPE_CHECKING:
    from typing_extensions import Self

__all__ = ["FrontierMiddleware", "cluster_choice", "frontier_of", "redis_of"]

logger = logging.getLogger(__name__)


def redis_of(crawler: Crawler) -> redis.Redis:
    """The Redis client a component uses: the running frontier's own (one connection pool per worker, and on a
    Redis Cluster one slot table and one command table, which the cluster client reads with COMMAND when it is
    made: some 0.7 ms of a server's CPU each), else a client of its own (no crawlhub scheduler: ``scrapy shell``,
    a unit test)."""
    frontier = frontier_of(crawler)
    if frontier is not None:
        return frontier.server
    return get_redis(crawler.settings, crawler.stats)


def cluster_choice(server: redis.Redis | None, key: str, field: str, proposal: str,
                   acceptable: Callable[[str], bool]) -> str:
    """One choice for the whole cluster, kept in field ``field`` of hash ``key``.

    The first worker to propose wins (HSETNX). A stored choice that this worker
    cannot use (``acceptable(choice)`` is false) is replaced by ``proposal``.
    Without Redis (no server, or an error) the proposal is this worker's own choice.
    """
    if server is None:
        return proposal
    try:
        pipe = server.pipeline(transaction=False)
        pipe.hsetnx(key, field, proposal)
        pipe.hget(key, field)
        _, stored = pipe.execute()
        chosen = stored.decode() if stored else proposal
        if not acceptable(chosen):
            server.hset(key, field, proposal)
            chosen = proposal
        return chosen
    except REDIS_ERRORS as exc:
        logger.warning("Redis unavailable (%s): %s of %s chosen by this worker alone", exc, key, field)
        return proposal


class FrontierMiddleware:
    """Base of the middlewares that work with the shared frontier (``self.frontier``, None without it)."""

    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        return cls(crawler)

    @property
    def frontier(self) -> FrontierView | None:
        return frontier_of(self.crawler)

    @property
    def server(self) -> redis.Redis | None:
        """The shared Redis (None: no shared frontier, e.g. a unit test or a plain Scrapy scheduler)."""
        frontier = frontier_of(self.crawler)
        return frontier.server if frontier is not None else None
