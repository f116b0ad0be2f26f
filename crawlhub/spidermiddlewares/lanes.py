"""LaneSpiderMiddleware: a page's links to a domain on a rung above plain go straight to that rung's lane
(crawlhub.roles), so that a worker without the rung never leases them only to move them (a lease and a slot of
the domain's politeness, for nothing). Pins (``meta["rung"]``, ``meta["browser"]``) the scheduler lanes itself;
a link whose domain moved after it was queued is moved once by the worker that leases it.

The ladder is this middleware's own copy (:class:`crawlhub.ladder.LadderCopy`): read every LADDER_REFRESH
seconds, and at once on this worker's ``ladder_moved``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Iterator
from typing import Any

from scrapy.crawler import Crawler
from scrapy.exceptions import NotConfigured
from scrapy.http import Request, Response

from crawlhub import meta, signals
from crawlhub._utils.urls import domain_of
from crawlhub.components import FrontierMiddleware
from crawlhub.ladder import LadderCopy


class LaneSpiderMiddleware(FrontierMiddleware):
    def __init__(self, crawler: Crawler) -> None:
        if not crawler.settings.getbool("LADDER_ENABLED"):
            raise NotConfigured("LADDER_ENABLED is off")
        super().__init__(crawler)
        self.copy = LadderCopy(crawler.settings.getfloat("LADDER_REFRESH"))
        crawler.signals.connect(self.copy.moved, signal=signals.ladder_moved)

    def _lane(self, element: Any) -> Any:
        if not isinstance(element, Request):
            return element
        frontier = self.frontier
        if frontier is None or element.meta.get(meta.LANE):
            return element
        copy = self.copy
        if not copy.current(frontier.server):  # no domain off the plain rung: nothing to look up (the usual case)
            return element
        state = copy.ladder.get(domain_of(element.url))
        if state is None:
            return element
        try:
            lane = frontier.roles.lane_for(element, self.crawler.spider, str(state.get("rung")))
        except ValueError:  # a pin that is not a rung: the ladder says so when the request is downloaded
            return element
        if lane:
            element.meta[meta.LANE] = lane
        return element

    async def process_spider_output_async(self, response: Response, result: AsyncIterator[Any]) -> AsyncIterator[Any]:
        async for element in result:
            yield self._lane(element)

    def process_spider_output(self, response: Response, result: Iterable[Any]) -> Iterator[Any]:
        for element in result:
            yield self._lane(element)
