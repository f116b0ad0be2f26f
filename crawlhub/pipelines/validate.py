"""ValidatePipeline: an item missing what its type requires is quarantined.

An invalid item raises :class:`InvalidItem`; MongoPipeline stores it in the
``quarantine`` collection with the reason and the source URL (it is never
dropped silently).
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from itemadapter import ItemAdapter
from scrapy.exceptions import DropItem

from crawlhub.items import is_empty, item_meta

_DECIMAL = re.compile(r"\d+(\.\d+)?")
_ISO4217 = re.compile(r"[A-Z]{3}")


class InvalidItem(DropItem):
    """An item that failed validation; ``reasons`` says why."""

    def __init__(self, reasons: list[str]):
        self.reasons = reasons
        super().__init__("invalid item, quarantined: " + "; ".join(reasons), log_level="WARNING")


def problems(item) -> list[str]:
    adapter = ItemAdapter(item)
    meta = item_meta(item)
    found = [f"missing {name}" for name in meta.required if is_empty(adapter.get(name))]
    for name in meta.url_fields:
        value = adapter.get(name)
        if value and not (
            isinstance(value, str) and urlsplit(value).scheme in ("http", "https") and urlsplit(value).hostname
        ):
            found.append(f"{name} {str(value)[:200]!r} is not an absolute http(s) URL")
    for price_field, currency_field in meta.price_fields:
        price, currency = adapter.get(price_field), adapter.get(currency_field)
        if price and not _DECIMAL.fullmatch(str(price)):
            found.append(f"{price_field} {str(price)[:50]!r} is not a decimal number")
        if currency and not _ISO4217.fullmatch(str(currency)):
            found.append(f"{currency_field} {str(currency)[:20]!r} is not an ISO 4217 code")
    return found


class ValidatePipeline:
    def __init__(self, crawler):
        self.crawler = crawler

    @classmethod
    def from_crawler(cls, crawler):
        return cls(crawler)

    def process_item(self, item):
        found = problems(item)
        if found:
            self.crawler.stats.inc_value("items/invalid")
            raise InvalidItem(found)
        return item
