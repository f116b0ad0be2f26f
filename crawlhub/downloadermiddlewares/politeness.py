"""PolitenessMiddleware: the download side of cluster-wide politeness.

A leased request already holds its domain's slot: the lease script granted it
within the domain's rate and concurrency (docs/politeness.md). This
middleware sits next to the download (950), so it sees every raw answer
before redirects and retries act on it, and for each one tells Redis
(one script call):

* the download is over: the domain's concurrency slot is free at once (not
  when the lease is acked after the items are stored);
* 429/503 (DOMAIN_SLOWDOWN_CODES): the domain slows down for every worker,
  and Retry-After blocks it until then; a success brings it back.

A request that holds no lease (a request that could not be stored as JSON)
takes the domain's next slot here and waits for it; so does a leased
request whose slot went to the robots.txt fetch it waited for (``RESLOT``).
A robots.txt fetch made for a leased request uses that request's slot.

Scrapy's own throttles act in each worker alone, on top of all this: a project that sets DOWNLOAD_DELAY,
a lower CONCURRENT_REQUESTS_PER_DOMAIN or AUTOTHROTTLE_ENABLED (``scrapy startproject`` writes the first
two) slows every worker down whatever DOMAIN_RATE allows, and its leased requests wait inside the worker.
The worker says so at open, in one warning (:func:`worker_throttles`).
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from scrapy import Spider, signals
from scrapy.crawler import Crawler
from scrapy.http import Request, Response
from scrapy.settings import SETTINGS_PRIORITIES, BaseSettings

from crawlhub import default_settings
from crawlhub import signals as crawlhub_signals
from crawlhub._utils.urls import domain_of
from crawlhub.components import FrontierMiddleware
from crawlhub.connection import REDIS_ERRORS
from crawlhub.downloadermiddlewares.retry import retry_after_seconds
from crawlhub.meta import LEASE, RESLOT, SLOT_TAKEN

if TYPE_CHECKING:
    from typing_extensions import Self

logger = logging.getLogger(__name__)

# where a setting above crawlhub's defaults came from, by its priority
ORIGINS = {"project": "settings.py or the environment", "spider": "the spider's custom_settings", "cmdline": "-s"}


def _origin(priority: int) -> str:
    for name, value in sorted(SETTINGS_PRIORITIES.items(), key=lambda kv: -kv[1]):
        if priority >= value and name in ORIGINS:
            return ORIGINS[name]
    return "the settings"


def worker_throttles(settings: BaseSettings) -> list[str]:
    """Scrapy's per-worker throttles set above crawlhub's defaults (by the project, the spider, the environment
    or ``-s``) that slow a worker down, each with what it does to the cluster's pace."""
    over: list[str] = []

    def given(name: str) -> bool:
        return (settings.getpriority(name) or 0) > SETTINGS_PRIORITIES["addon"]

    delay = settings.getfloat("DOWNLOAD_DELAY")
    if given("DOWNLOAD_DELAY") and delay > 0:
        over.append(f"DOWNLOAD_DELAY = {delay:g} (from {_origin(settings.getpriority('DOWNLOAD_DELAY') or 0)}): each "
                    f"worker waits {delay:g}s between two requests to a domain: {1 / delay:.3g} request(s) a second "
                    "per worker and domain at most (N workers: N times that), whatever DOMAIN_RATE allows")
    per_domain = settings.getint("CONCURRENT_REQUESTS_PER_DOMAIN")
    if given("CONCURRENT_REQUESTS_PER_DOMAIN") and 0 < per_domain < default_settings.CONCURRENT_REQUESTS_PER_DOMAIN:
        over.append(f"CONCURRENT_REQUESTS_PER_DOMAIN = {per_domain} (from "
                    f"{_origin(settings.getpriority('CONCURRENT_REQUESTS_PER_DOMAIN') or 0)}): each worker downloads "
                    f"{per_domain} page(s) of a domain at a time, under DOMAIN_CONCURRENCY "
                    f"{settings.getint('DOMAIN_CONCURRENCY')}; the rest of what it leased waits inside the worker")
    if given("AUTOTHROTTLE_ENABLED") and settings.getbool("AUTOTHROTTLE_ENABLED"):
        over.append(f"AUTOTHROTTLE_ENABLED = True (from {_origin(settings.getpriority('AUTOTHROTTLE_ENABLED') or 0)}): "
                    "each worker slows itself down from its own latencies (from AUTOTHROTTLE_START_DELAY "
                    f"{settings.getfloat('AUTOTHROTTLE_START_DELAY'):g}s), unseen by the others, on top of the "
                    "cluster's own slowdown on 429/503")
    return over


class PolitenessMiddleware(FrontierMiddleware):

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        middleware = cls(crawler)
        crawler.signals.connect(middleware.spider_opened, signal=signals.spider_opened)
        return middleware

    def spider_opened(self, spider: Spider) -> None:
        """A worker of the shared frontier whose Scrapy throttles override the cluster's politeness says so."""
        settings = self.crawler.settings
        over = worker_throttles(settings)
        if self.frontier is None or not over:
            return
        logger.warning("Scrapy settings slow each worker down on its own, on top of the cluster's politeness "
                       "(DOMAIN_RATE %s and DOMAIN_CONCURRENCY %d per domain, for all workers together): %s. Remove "
                       "them (`scrapy startproject` writes DOWNLOAD_DELAY = 1 and CONCURRENT_REQUESTS_PER_DOMAIN = 1 "
                       "into settings.py) and set the cluster's pace with DOMAIN_RATE, DOMAIN_CONCURRENCY or "
                       "DOMAIN_LIMITS", settings.get("DOMAIN_RATE"), settings.getint("DOMAIN_CONCURRENCY"),
                       "; ".join(over))

    async def process_request(self, request: Request) -> Request | Response | None:
        frontier = self.frontier
        if frontier is None or request.meta.pop(SLOT_TAKEN, False):
            return None
        if request.meta.get(LEASE) and not request.meta.pop(RESLOT, False):
            return None
        try:
            wait = frontier.politeness.reserve(domain_of(request.url))
        except REDIS_ERRORS as exc:
            logger.warning("Redis unavailable (%s): %s goes without a politeness slot", exc, request.url)
            return None
        if wait > 0:
            await asyncio.sleep(wait)
        return None

    def process_response(self, request: Request, response: Response) -> Request | Response:
        self._finish(request, response.status, retry_after_seconds(response.headers.get(b"Retry-After")))
        return response

    def process_exception(self, request: Request, exception: BaseException) -> Request | Response | None:
        self._finish(request, None)
        return None

    def _finish(self, request: Request, status: int | None, retry_after: float = 0.0) -> None:
        """The download is over: the frontier's warden frees the domain's slot (crawlhub.signals.download_finished)."""
        self.crawler.signals.send_catch_log(crawlhub_signals.download_finished, request=request, status=status,
                                            retry_after=retry_after)
