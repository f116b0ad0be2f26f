"""LeaseSpiderMiddleware: a page's lease ends after its output is processed.

It sits closest to the engine among spider middlewares (10): it counts the
items a page's callback yields and tells the frontier when the callback's
output is exhausted (or raised). The item signals (scraped, dropped, error)
count them back in. When both are done the lease is ready, and it is acked
after the store's next flush. Each item is marked with the page fetch it came
from (:func:`crawlhub.items.page_of`), so that DedupePipeline can scope itself
to one page.
"""

from __future__ import annotations

import itertools
from contextlib import contextmanager

from scrapy import Request, signals

from crawlhub.components import frontier_of
from crawlhub.items import mark_page
from crawlhub.pipelines.validate import InvalidItem


class LeaseSpiderMiddleware:
    def __init__(self, crawler):
        self.crawler = crawler
        self._pages = itertools.count(1)
        for signal in (signals.item_scraped, signals.item_dropped, signals.item_error):
            crawler.signals.connect(self.item_finished, signal=signal)

    @classmethod
    def from_crawler(cls, crawler):
        return cls(crawler)

    def item_finished(self, item, response=None, exception=None, **kwargs):
        frontier = frontier_of(self.crawler)
        if frontier is not None and response is not None:
            frontier.item_finished(response.request, invalid=isinstance(exception, InvalidItem))

    @contextmanager
    def _tracking(self, response):
        """Yields a function to pass each output element through; reports the end."""
        frontier = frontier_of(self.crawler)
        page = next(self._pages)

        def emitted(element):
            if not isinstance(element, Request):
                mark_page(element, page)
                if frontier is not None:
                    frontier.item_emitted(response.request)
            return element

        error = None
        try:
            yield emitted
        except Exception as exc:
            error = exc
            raise
        finally:
            if frontier is not None:
                frontier.output_finished(getattr(response, "request", None), error)

    async def process_spider_output_async(self, response, result):
        with self._tracking(response) as emitted:
            async for element in result:
                yield emitted(element)

    def process_spider_output(self, response, result):
        with self._tracking(response) as emitted:
            for element in result:
                yield emitted(element)
