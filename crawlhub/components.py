"""Downloader and spider middlewares: leases, retries, politeness, robots.txt."""

import logging

import redis

logger = logging.getLogger(__name__)


def cluster_choice(server, key: str, field: str, proposal: str, acceptable) -> str:
    """One choice for the whole cluster, kept in field ``field`` of hash ``key``.

    The first worker to propose wins (HSETNX). A stored choice that this worker
    cannot use (``acceptable(choice)`` is false) is replaced by ``proposal``.
    Without Redis (no server, or an error) the proposal is this worker's own choice.
    """
    if server is None:
        return proposal
    try:
        pipe = server.pipeline(transaction=False)
        pipe.hsetnx(key, field, proposal).hget(key, field)
        _, stored = pipe.execute()
        chosen = stored.decode() if stored else proposal
        if not acceptable(chosen):
            server.hset(key, field, proposal)
            chosen = proposal
        return chosen
    except redis.RedisError as exc:
        logger.warning("Redis unavailable (%s): %s of %s chosen by this worker alone", exc, key, field)
        return proposal


def frontier_scheduler(crawler, needs: str = "lease_of"):
    """The running crawl's scheduler if it is crawlhub's (it has ``needs``), else None."""
    try:
        engine = crawler.engine
    except RuntimeError:  # the crawl has not started (Scrapy sets the engine then)
        return None
    scheduler = engine.scheduler if engine else None
    return scheduler if getattr(scheduler, needs, None) is not None else None


class FrontierMiddleware:
    """Base of the middlewares that work with crawlhub's scheduler (``needs`` names what they use)."""

    needs = "lease_of"

    def __init__(self, crawler):
        self.crawler = crawler

    @classmethod
    def from_crawler(cls, crawler):
        return cls(crawler)

    @property
    def scheduler(self):
        return frontier_scheduler(self.crawler, self.needs)
