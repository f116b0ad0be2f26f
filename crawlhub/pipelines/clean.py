"""CleanPipeline: normalise whitespace, prices, URLs and derived keys.

* every text field: whitespace collapsed and stripped; empty becomes None;
* URL fields: made absolute against the item's source_url;
* a key field that holds an http(s) URL: in the form the request fingerprint reads (``canonical_key_url``: without
  URL_TRACKING_PARAMS too), so a page met under two forms of its URL is one stored document
  (ITEM_KEY_URLS_CANONICAL);
* the item type's price fields (``price_fields``): "£63.00" -> "63.00" and
  currency "GBP", parsed with price-parser (currency symbols mapped to ISO
  4217 codes; a bare "$" is USD unless the spider's ``currency`` attribute or
  DEFAULT_CURRENCY says otherwise);
* ``host_fields`` from the URL's host; ``derived_keys`` as SHA-1 of their
  fields (the demo's Quote.quote_id = sha1(text + author)); see crawlhub.items;
* a text longer than ITEM_FIELD_MAX_CHARS is cut there (logged and counted:
  ``items/truncated_fields``), so one huge field cannot make a document
  MongoDB refuses;
* scraped_at set to the current UTC time.
"""

from __future__ import annotations

import hashlib
import logging
import re
from datetime import datetime, timezone
from decimal import Decimal
from typing import TYPE_CHECKING, Any
from urllib.parse import urljoin, urlsplit

from itemadapter import ItemAdapter
from price_parser import Price
from scrapy.crawler import Crawler
from w3lib.url import canonicalize_url

from crawlhub._utils.urls import IgnoredParams
from crawlhub.items import item_meta

if TYPE_CHECKING:
    from typing_extensions import Self

logger = logging.getLogger(__name__)
_WS = re.compile(r"\s+")
CURRENCY_SYMBOLS = {
    "£": "GBP", "€": "EUR", "$": "USD", "US$": "USD", "¥": "JPY", "₹": "INR", "₽": "RUB",
    "₩": "KRW", "₺": "TRY", "₴": "UAH", "₪": "ILS", "฿": "THB", "₫": "VND", "zł": "PLN",
    "R$": "BRL", "C$": "CAD", "CA$": "CAD", "A$": "AUD", "AU$": "AUD", "NZ$": "NZD",
    "HK$": "HKD", "S$": "SGD", "Fr.": "CHF", "Kč": "CZK", "Ft": "HUF",
}
TWO_PLACES = Decimal("0.01")


def clean_text(value: Any) -> Any:
    if isinstance(value, str):
        value = _WS.sub(" ", value).strip()
        return value or None
    if isinstance(value, list):
        return [v for v in (clean_text(x) for x in value) if v is not None]
    return value


def currency_code(found: str | None, fallback: str | None = None) -> str | None:
    if found:
        found = found.strip()
        if found in CURRENCY_SYMBOLS and not (found == "$" and fallback):
            return CURRENCY_SYMBOLS[found]
        if re.fullmatch(r"[A-Za-z]{3}", found):
            return found.upper()
    return fallback.upper() if fallback else None


def parse_price(text: Any, fallback_currency: str | None = None) -> tuple[str | None, str | None]:
    """"£1,234.5" -> ("1234.50", "GBP"); unparseable -> (text, None) for validation to flag."""
    if text is None:
        return None, currency_code(None, fallback_currency)
    price = Price.fromstring(str(text))
    if price.amount is None:
        return str(text), currency_code(price.currency, fallback_currency)
    amount = price.amount
    exponent = amount.as_tuple().exponent
    if isinstance(exponent, int) and exponent > -2:
        amount = amount.quantize(TWO_PLACES)
    return format(amount, "f"), currency_code(price.currency, fallback_currency)


def derived_key(*values: Any) -> str:
    """A key made of field values: SHA-1 of them joined by \\x1f (None as empty)."""
    return hashlib.sha1("\x1f".join("" if v is None else str(v) for v in values).encode()).hexdigest()


def absolute_against(item: Any, base: str) -> Any:
    """``item`` with each relative value of its ``url_fields`` joined to ``base`` (stripped first): CleanPipeline's,
    against the item's ``source_url``, and BaseUrlSpiderMiddleware's, against the page's ``<base href>``."""
    adapter = ItemAdapter(item)
    for name in item_meta(item).url_fields:
        value = adapter.get(name) if name in adapter else None
        if isinstance(value, str) and (value := value.strip()) and not urlsplit(value).scheme:
            adapter[name] = urljoin(base, value)
    return item


def canonical_key_url(value: Any, tracking: IgnoredParams | None = None) -> Any:
    """A key's URL in the form the request fingerprint reads it (w3lib's ``canonicalize_url``, as Scrapy's: the
    query's arguments sorted, percent-escapes made one way, the host in lower case, an empty query dropped; and
    without the ``tracking`` parameters, as crawlhub's fingerprinter reads it), so two forms of one page's URL, which
    the frontier fetches once, are one stored document. An in-page anchor goes (``#reviews``), as in the
    fingerprint; a fragment that routes a single-page app (``#/item/1``, ``#!item/1``) stays: it names another
    document. Anything but an absolute http(s) URL is returned as it is."""
    if not isinstance(value, str):
        return value
    try:
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            return value
        url = tracking.strip_url(value) if tracking else value
        return canonicalize_url(url, keep_fragments=parts.fragment.startswith(("/", "!")))
    except ValueError:  # not a URL after all (a bad port, a bad IPv6 host): ValidatePipeline judges it
        return value


class CleanPipeline:
    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler
        self.default_currency = crawler.settings.get("DEFAULT_CURRENCY") or None
        self.max_chars = crawler.settings.getint("ITEM_FIELD_MAX_CHARS")
        self.canonical_keys = crawler.settings.getbool("ITEM_KEY_URLS_CANONICAL")
        self.tracking = IgnoredParams(crawler.settings.getlist("URL_TRACKING_PARAMS"))

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        return cls(crawler)

    def process_item(self, item: Any) -> Any:
        adapter = ItemAdapter(item)
        for name in list(adapter.keys()):
            value = adapter[name] = clean_text(adapter.get(name))
            if self.max_chars and isinstance(value, str) and len(value) > self.max_chars:
                adapter[name] = value[: self.max_chars]
                self.crawler.stats.inc_value("items/truncated_fields")
                logger.warning("Cut %s of a %s from %s at %d characters (it had %d; ITEM_FIELD_MAX_CHARS)", name,
                               type(item).__name__, adapter.get("source_url"), self.max_chars, len(value))
        base = adapter.get("source_url") or adapter.get("url")
        if base:
            absolute_against(item, base)
        meta = item_meta(item)
        if self.canonical_keys:
            for name in meta.key_fields:
                value = adapter.get(name) if name in adapter else None
                if (canonical := canonical_key_url(value, self.tracking)) != value:
                    adapter[name] = canonical
                    self.crawler.stats.inc_value("items/key_urls_canonical")
        if meta.price_fields:
            spider_currency = getattr(self.crawler.spider, "currency", None) or self.default_currency
            for price_field, currency_field in meta.price_fields:
                adapter[price_field], found = parse_price(adapter.get(price_field), spider_currency)
                adapter[currency_field] = currency_code(adapter.get(currency_field), None) or found
        for name in meta.host_fields:
            if not adapter.get(name):
                adapter[name] = urlsplit(adapter.get("source_url") or adapter.get("url") or "").hostname
        for name, parts in meta.derived_keys:
            adapter[name] = derived_key(*(adapter.get(part) for part in parts))
        if "scraped_at" in adapter.field_names() and adapter.get("scraped_at") is None:
            adapter["scraped_at"] = datetime.now(timezone.utc)
        return item
