"""Sitemaps feed the crawl: ``SitemapMixin``, part of every CrawlhubSpider.

As Scrapy's SitemapSpider (and with its utilities: ``scrapy.utils.sitemap.Sitemap``,
``scrapy.utils.gz.gunzip``; robots.txt's ``Sitemap:`` lines through Protego)::

    sitemap_urls = ["https://shop.example/robots.txt"]   # robots.txt, sitemap indexes or sitemaps
    sitemap_rules = [(r"/product/", "parse_product")]     # loc regex -> callback (default: parse)
    sitemap_follow = [r"products"]                         # which sitemaps of an index to follow
    sitemap_alternate_links = False                        # also the xhtml:link alternates
    sitemap_revisit = "1h"                                 # how often sitemaps are read again

or a seed ``{"sitemap": "https://shop.example/robots.txt"}``. Sitemaps are
revisited like pages (conditional GET: an unchanged sitemap is a 304 and is
not parsed again). A ``<lastmod>`` newer than a page's last fetch makes the
page due now: the status store moves its next fetch time, and the refresher
queues it with its validators. URLs never seen go through the frontier as
usual.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable, Iterator
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from protego import Protego
from scrapy import Request
from scrapy.http import Response, XmlResponse
from scrapy.utils.gz import gunzip, gzip_magic_number
from scrapy.utils.sitemap import Sitemap

from crawlhub import meta
from crawlhub import signals as crawlhub_signals
from crawlhub.components import frontier_of

if TYPE_CHECKING:
    from pymongo import UpdateOne


class LastModified:
    """A sitemap's ``<lastmod>`` for a page: due now if it changed after the page's last fetch (never an insert)."""

    def __init__(self, spider: str, fp: str, lastmod: float, now: float) -> None:
        self.spider, self.fp, self.lastmod, self.now = spider, fp, lastmod, now

    @property
    def id(self) -> str:
        return f"{self.spider}:{self.fp}"

    def operation(self) -> UpdateOne:
        # (imported here: the spiders' modules import this one, and the crawlhub command need not load pymongo)
        from pymongo import UpdateOne

        return UpdateOne({"_id": self.id, "last_fetch": {"$lt": self.lastmod}, "next_fetch": {"$gt": self.now}},
                         {"$set": {"next_fetch": self.now}})


def parse_lastmod(value: str | None) -> float | None:
    """A W3C datetime ("2026-11-23", "2026-11-23T10:00:00+00:00", "...Z") as a unix time; None if it is not one."""
    if not value:
        return None
    text = value.strip().replace("Z", "+00:00")
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return when.timestamp()


class SitemapError(ValueError):
    """A sitemap request that gives no sitemap (an HTML page where the sitemap was, a broken gzip, a robots.txt with no
    ``Sitemap:`` line): its callback raises it, so the request ends in the DLQ with the reason (`crawlhub dlq list`;
    requeued once the site is fixed) instead of ending as a page that had nothing to say."""


class SitemapMixin:
    sitemap_urls: Iterable[str] = ()
    sitemap_rules: Iterable[tuple[str | re.Pattern[str], str]] = (("", "parse"),)
    sitemap_follow: Iterable[str | re.Pattern[str]] = ("",)
    sitemap_alternate_links = False
    sitemap_revisit: str | float | None = None

    def sitemap_requests(self, urls: Iterable[str]) -> Iterator[Request]:
        for url in urls:
            yield self.sitemap_request(url)

    def sitemap_request(self, url: str, **kwargs: Any) -> Request:
        request_meta = dict(kwargs.pop("meta", None) or {})
        if self.sitemap_revisit is not None:
            request_meta.setdefault(meta.REVISIT, self.sitemap_revisit)
        return Request(url, callback=self.parse_sitemap, meta=request_meta, **kwargs)

    def parse_sitemap(self, response: Response) -> Iterator[Request]:
        """A robots.txt (its Sitemap: lines), a sitemap index (its sitemaps) or a sitemap (its pages)."""
        if response.url.endswith("/robots.txt"):
            sitemaps = list(Protego.parse(response.body.decode("utf-8", "replace")).sitemaps)
            if not sitemaps:
                raise self._invalid(f"{response.url} has no Sitemap: line")
            for url in sitemaps:
                yield self.sitemap_request(response.urljoin(url))
            return
        body = self.sitemap_body(response)
        sitemap = Sitemap(body) if body else None
        if sitemap is None or sitemap.type not in ("sitemapindex", "urlset"):
            kind = (response.headers.get("Content-Type") or b"no Content-Type").decode("latin-1")
            raise self._invalid(f"{response.url} is not a sitemap ({kind}, {len(response.body)} bytes)")
        follow = [re.compile(x) if isinstance(x, str) else x for x in self.sitemap_follow]
        rules = [(re.compile(r) if isinstance(r, str) else r, c) for r, c in self.sitemap_rules]
        lastmods: list[LastModified] = []
        for entry in sitemap:
            for loc in self._locs(entry):
                if sitemap.type == "sitemapindex":
                    if any(x.search(loc) for x in follow):
                        yield self.sitemap_request(loc)
                    continue
                callback = next((c for r, c in rules if r.search(loc)), None)
                if callback is None:
                    continue
                request = Request(loc, callback=getattr(self, callback) if isinstance(callback, str) else callback)
                lastmod = parse_lastmod(entry.get("lastmod"))
                if lastmod is not None:
                    fp = self.crawler.request_fingerprinter.fingerprint(request).hex()  # type: ignore[attr-defined]
                    lastmods.append(LastModified(self.name, fp, lastmod, 0.0))  # type: ignore[attr-defined]
                yield request
        self._record_lastmods(lastmods)

    def _invalid(self, reason: str) -> SitemapError:
        """The error a sitemap request that gives no sitemap raises (counted as ``sitemap/invalid``)."""
        self.crawler.stats.inc_value("sitemap/invalid")  # type: ignore[attr-defined]
        return SitemapError(reason)

    def _locs(self, entry: dict[str, Any]) -> Iterator[str]:
        if entry.get("loc"):
            yield entry["loc"]
        if self.sitemap_alternate_links:
            yield from entry.get("alternate") or ()

    def _record_lastmods(self, lastmods: list[LastModified]) -> None:
        """Pages whose lastmod is after their last fetch become due (written with the store's next flush)."""
        if not lastmods:
            return
        frontier = frontier_of(self.crawler)  # type: ignore[attr-defined]
        if frontier is None:
            return
        now = time.time()
        for lastmod in lastmods:
            lastmod.now = now
        self.crawler.signals.send_catch_log(crawlhub_signals.status_observed, updates=lastmods)  # type: ignore[attr-defined]

    def sitemap_body(self, response: Response) -> bytes | None:
        """The sitemap XML of a response (gunzipped if need be, within DOWNLOAD_MAXSIZE), or None."""
        if isinstance(response, XmlResponse):
            return response.body
        if gzip_magic_number(response):
            try:
                return gunzip(response.body, max_size=self.crawler.settings.getint("DOWNLOAD_MAXSIZE"))  # type: ignore[attr-defined]
            except Exception as exc:  # noqa: BLE001 - too large or broken: the request's end, with the reason
                raise self._invalid(f"{response.url} cannot be gunzipped: {exc}") from None
        if response.url.endswith((".xml", ".xml.gz")):
            return response.body
        return None
