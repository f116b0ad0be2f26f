"""DedupePipeline: drop an item that one page fetch yielded twice.

Scope: one fetch of one page (the token LeaseSpiderMiddleware marks each item
with, :func:`crawlhub.items.page_of`). A listing that shows a product twice
stores it once; the same product found on another page, or on the same page
in a later crawl round, goes on to MongoDB, whose unique key makes it one
document and moves its ``last_seen`` (a long-running worker never drops a
re-crawl's items). Memory: the keys of the DEDUPE_PAGES most recent pages.
Items that carry no page mark (plain dicts) are not deduplicated here.
"""

from __future__ import annotations

import hashlib
import logging
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

from itemadapter import ItemAdapter
from scrapy.crawler import Crawler
from scrapy.exceptions import DropItem

from crawlhub.items import item_meta, page_of

if TYPE_CHECKING:
    from typing_extensions import Self

logger = logging.getLogger(__name__)


def item_key(item: Any) -> tuple[Any, ...]:
    meta = item_meta(item)
    adapter = ItemAdapter(item)
    return (meta.collection, *(adapter.get(name) for name in meta.key_fields))


class DedupePipeline:
    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler
        self.max_pages = max(1, crawler.settings.getint("DEDUPE_PAGES", 1000))
        self.pages: OrderedDict[int, set[bytes]] = OrderedDict()

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        return cls(crawler)

    def process_item(self, item: Any) -> Any:
        page = page_of(item)
        if page is None:
            return item
        seen = self.pages.get(page)
        if seen is None:
            seen = self.pages[page] = set()
            while len(self.pages) > self.max_pages:
                self.pages.popitem(last=False)
        key = item_key(item)
        digest = hashlib.blake2b(repr(key).encode(), digest_size=8).digest()
        if digest in seen:
            self.crawler.stats.inc_value("items/duplicates_dropped")
            source = ItemAdapter(item).get("source_url") if "source_url" in ItemAdapter(item).field_names() else None
            raise DropItem(f"duplicate item {key} on the same page {source or ''}".rstrip(), log_level="INFO")
        seen.add(digest)
        return item
