"""BaseUrlSpiderMiddleware: an item's relative URLs, read from a page that declares ``<base href>``, are made
absolute against that base, as a browser (and Scrapy's ``response.urljoin``, and ``follow_links``) reads them.

CleanPipeline makes a type's ``url_fields`` absolute against the item's ``source_url``: a pipeline has no page.
On a page with ``<base href="https://shop.example/catalog/">`` at ``https://shop.example/list?page=2``, the link
``item-1`` is ``https://shop.example/catalog/item-1``; joined against the page's URL it would be
``https://shop.example/item-1``, a wrong URL stored without a word. Here the page is at hand; a page without a base
of its own is left to CleanPipeline (the same URL either way).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Iterator
from typing import TYPE_CHECKING, Any

from itemadapter import is_item
from scrapy.crawler import Crawler
from scrapy.http import HtmlResponse, Request, Response
from scrapy.utils.response import get_base_url

from crawlhub.pipelines.clean import absolute_against

if TYPE_CHECKING:
    from typing_extensions import Self


class BaseUrlSpiderMiddleware:
    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        return cls(crawler)

    @staticmethod
    def _base(response: Response) -> str | None:
        """The page's own base, when it declares one other than its URL (Scrapy caches it per response)."""
        if not isinstance(response, HtmlResponse):
            return None
        base = get_base_url(response)
        return base if base != response.url else None

    @staticmethod
    def _absolute(element: Any, base: str | None) -> Any:
        if base is None or isinstance(element, Request) or not is_item(element):
            return element
        return absolute_against(element, base)

    async def process_spider_output_async(self, response: Response, result: AsyncIterator[Any]) -> AsyncIterator[Any]:
        base = self._base(response)
        async for element in result:
            yield self._absolute(element, base)

    def process_spider_output(self, response: Response, result: Iterable[Any]) -> Iterator[Any]:
        base = self._base(response)
        for element in result:
            yield self._absolute(element, base)
