"""ValidatePipeline: an item that breaks its type's contract is quarantined.

The contract (crawlhub.contracts) is the type's required fields and what its fields declare (JSON Schema
through ``jsonschema``), plus what the pipelines need of ``url_fields`` and ``price_fields``. An invalid item
raises :class:`InvalidItem`, with its reasons per field; MongoPipeline stores it in the ``quarantine``
collection with the reasons and the source URL (it is never dropped silently).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from itemadapter import ItemAdapter
from scrapy.crawler import Crawler

from crawlhub.contracts import contract_of, dict_contract
from crawlhub.exceptions import InvalidItem
from crawlhub.items import item_meta

if TYPE_CHECKING:
    from typing_extensions import Self

_DECIMAL = re.compile(r"\d+(\.\d+)?")
ISO4217 = re.compile(r"[A-Z]{3}")  # a currency code (DEFAULT_CURRENCY too)


def field_problems(item: Any) -> dict[str, list[str]]:
    """Field -> what is wrong with it, in the contract's order: required fields, URLs, prices, the JSON Schema."""
    adapter = ItemAdapter(item)
    meta = item_meta(item)
    values = adapter.asdict()
    contract = contract_of(type(item)) if not isinstance(item, dict) else dict_contract(meta.required)  # type: ignore[arg-type]
    checked = contract.check(values)
    found = {name: reasons for name, reasons in checked.items() if reasons[0] == f"missing {name}"}
    schema_found = {name: reasons for name, reasons in checked.items() if name not in found}

    def add(name: str, reason: str) -> None:
        found.setdefault(name, []).append(reason)

    for name in meta.url_fields:
        value = adapter.get(name)
        if value and not (
            isinstance(value, str) and urlsplit(value).scheme in ("http", "https") and urlsplit(value).hostname
        ):
            add(name, f"{name} {str(value)[:200]!r} is not an absolute http(s) URL")
    for price_field, currency_field in meta.price_fields:
        price, currency = adapter.get(price_field), adapter.get(currency_field)
        if price and not _DECIMAL.fullmatch(str(price)):
            add(price_field, f"{price_field} {str(price)[:50]!r} is not a decimal number")
        if currency and not ISO4217.fullmatch(str(currency)):
            add(currency_field, f"{currency_field} {str(currency)[:20]!r} is not an ISO 4217 code")
    for name, reasons in schema_found.items():
        if name not in found:
            found[name] = reasons
    return found


def problems(item: Any) -> list[str]:
    """Every reason ``item`` breaks its contract (empty: it keeps it)."""
    return [reason for reasons in field_problems(item).values() for reason in reasons]


class ValidatePipeline:
    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        return cls(crawler)

    def process_item(self, item: Any) -> Any:
        found = field_problems(item)
        if found:
            self.crawler.stats.inc_value("items/invalid")
            raise InvalidItem([reason for reasons in found.values() for reason in reasons], found)
        return item
