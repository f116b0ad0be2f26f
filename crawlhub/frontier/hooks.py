"""The lease warden's hooks in Scrapy's middleware chains (crawlhub/frontier/warden.py owns every lease's end).

* :class:`LeaseDownloaderMiddleware` sits closest to the engine among
  downloader middlewares (10): every exception on the way (robots.txt and
  offsite drops raise IgnoreRequest; download errors that the retry middleware
  did not take) reaches its ``process_exception``. A dropped request's lease
  is acked; any other error sends it to the dead-letter list with the error.
  A dead-lettered request without an errback ends as :class:`DeadLettered` (an
  IgnoreRequest): the dead-letter line says what failed and where the request
  went, and Scrapy's own "Error downloading" traceback would only repeat it.
  A request with an errback gets the original failure, as always.
* :class:`LeaseSpiderMiddleware` sits closest to the engine among spider
  middlewares (10): it counts the items a page's callback yields and says when
  the callback's output is exhausted (or raised); Scrapy's item signals count
  them back in (the warden). When both are done the lease is ready, and it is
  acked after the store's next flush. Each item is marked with the page fetch
  it came from (:func:`crawlhub.items.page_of`), so that DedupePipeline can
  scope itself to one page.

Off the shared frontier (no crawlhub scheduler) both do nothing.
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from scrapy import Request
from scrapy.crawler import Crawler
from scrapy.exceptions import IgnoreRequest
from scrapy.http import Response

from crawlhub._utils.errors import download_failure_text
from crawlhub.exceptions import DeadLettered
from crawlhub.frontier.view import scheduler_of
from crawlhub.frontier.warden import LeaseWarden
from crawlhub.intent import dead_letter, drop
from crawlhub.items import mark_page

__all__ = ["DeadLettered", "LeaseDownloaderMiddleware", "LeaseSpiderMiddleware"]


def _warden(crawler: Crawler) -> LeaseWarden | None:
    scheduler = scheduler_of(crawler)
    return scheduler.warden if scheduler is not None else None


class LeaseDownloaderMiddleware:
    def __init__(self, crawler: Crawler):
        self.crawler = crawler

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> LeaseDownloaderMiddleware:
        return cls(crawler)

    def process_exception(self, request: Request, exception: Exception) -> None:
        warden = _warden(self.crawler)
        if warden is None or warden.frontier.lease_of(request) is None:
            return None
        if isinstance(exception, IgnoreRequest):
            warden.frontier.ends.end(drop(request, str(exception) or type(exception).__name__))
            return None
        reason = download_failure_text(exception, request, self.crawler.settings.getint("DOWNLOAD_MAXSIZE"))
        warden.frontier.ends.end(dead_letter(request, reason))
        if request.errback is None:  # the dead-letter line said it all: no second ERROR with a traceback
            raise DeadLettered(reason)
        return None


class LeaseSpiderMiddleware:
    def __init__(self, crawler: Crawler):
        self.crawler = crawler
        self._pages = itertools.count(1)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> LeaseSpiderMiddleware:
        return cls(crawler)

    @contextmanager
    def _tracking(self, response: Response) -> Iterator[Callable[[Any], Any]]:
        """Yields a function to pass each output element through; reports the end."""
        warden = _warden(self.crawler)
        page = next(self._pages)

        def emitted(element: Any) -> Any:
            if not isinstance(element, Request):
                mark_page(element, page)
                if warden is not None:
                    warden.item_emitted(response.request)
            return element

        error = None
        try:
            yield emitted
        except Exception as exc:
            error = exc
            raise
        finally:
            if warden is not None:
                warden.output_finished(getattr(response, "request", None), error)

    async def process_spider_output_async(self, response: Response, result: AsyncIterator[Any]) -> AsyncIterator[Any]:
        with self._tracking(response) as emitted:
            async for element in result:
                yield emitted(element)

    def process_spider_output(self, response: Response, result: Iterable[Any]) -> Iterator[Any]:
        with self._tracking(response) as emitted:
            for element in result:
                yield emitted(element)
