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
"""

from __future__ import annotations

import asyncio
import logging

from scrapy.http import Request, Response

from crawlhub import signals as crawlhub_signals
from crawlhub._utils.urls import domain_of
from crawlhub.components import FrontierMiddleware
from crawlhub.connection import REDIS_ERRORS
from crawlhub.downloadermiddlewares.retry import retry_after_seconds
from crawlhub.meta import LEASE, RESLOT, SLOT_TAKEN

logger = logging.getLogger(__name__)


class PolitenessMiddleware(FrontierMiddleware):

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
