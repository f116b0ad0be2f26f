"""QualityMonitor: know when extraction breaks, and never let a broken extraction damage stored data.

Every leased page is judged when its work is done (``crawlhub.signals.page_done``: its output consumed, every
item through the pipelines), against the page's own baseline: the items it yielded at its last healthy fetch,
which the URL status store keeps (``items``) and the refresher hands back with a revisit:

* **healthy**: it yielded at least ``QUALITY_PAGE_MIN_SHARE`` of its baseline (any number without one) and
  none of its items was quarantined; or it answered 404/410 (its items are gone);
* **broken**: it had a baseline and yields less than that share of it (none at all, typically: the site
  changed its markup);
* **degraded**: some of its items were quarantined (ValidatePipeline): they were not stored again.

What is stored is protected: a broken or degraded page never marks its items gone (its ``GoneCheck`` is
skipped: their ``last_seen`` says nothing about the site). A broken page keeps its baseline and its revisit
interval, and loses its validators and body signature, so that its next fetch is a whole GET which a fixed
spider parses again (a conditional GET would answer 304 and the page would never be parsed). It is kept for
inspection in ``<spider>:quality:broken`` (URL, why, since when) until a fetch of it is healthy again.

The first broken page of a URL pattern (the spider's ``quality_rules`` or ``revisit_rules`` regexes, else the
URL's host and path with every number made ``*``) opens an event in ``<spider>:quality:events`` (one WARNING
line in the worker that opens it; ``crawlhub quality`` and ``crawlhub status`` show it); the event closes,
into ``<spider>:quality:closed``, when no page of its pattern is broken any more.

Redis writes are batched: one pipeline every ``QUALITY_FLUSH_INTERVAL`` seconds and at close, never one per
page. What this worker keeps meanwhile is only what it has yet to send.
"""

from __future__ import annotations

import json
import logging
import re
import time
from typing import Any
from urllib.parse import urlsplit

from scrapy import signals
from scrapy.crawler import Crawler
from scrapy.exceptions import NotConfigured
from twisted.internet import task

from crawlhub import meta
from crawlhub import signals as crawlhub_signals
from crawlhub.components import frontier_of
from crawlhub.connection import REDIS_ERRORS
from crawlhub.revisit.store import GoneCheck, StatusUpdate

logger = logging.getLogger(__name__)

_NUMBER = re.compile(r"\d+")
CLOSED_MAX = 1000  # closed events kept per spider


def quality_keys(spider: str) -> dict[str, str]:
    """The spider's quality keys in Redis (kept across `crawlhub reset`: they describe the site and the store)."""
    return {name: f"{spider}:quality:{name}" for name in ("broken", "events", "closed")}


def url_pattern(url: str, rules: tuple[re.Pattern[str], ...] = ()) -> str:
    """The kind of page ``url`` is: the first of ``rules`` it matches, else its host and path, numbers as ``*``."""
    for rule in rules:
        if rule.search(url):
            return rule.pattern
    parts = urlsplit(url)
    host = parts.hostname or "?"
    if parts.port:
        host += f":{parts.port}"
    return host + (_NUMBER.sub("*", parts.path) or "/")


def spider_rules(spider: Any) -> tuple[re.Pattern[str], ...]:
    declared = getattr(spider, "quality_rules", None) or list(dict(getattr(spider, "revisit_rules", None) or {}))
    return tuple(re.compile(rule) for rule in declared)


class QualityMonitor:
    def __init__(self, crawler: Crawler):
        settings = crawler.settings
        if not settings.getbool("QUALITY_ENABLED", True):
            raise NotConfigured("QUALITY_ENABLED is off")
        self.crawler = crawler
        self.min_share = settings.getfloat("QUALITY_PAGE_MIN_SHARE", 0.5)
        self.interval = settings.getfloat("QUALITY_FLUSH_INTERVAL", 2.0)
        self.broken_max = settings.getint("QUALITY_BROKEN_MAX", 10000)
        self.rules: tuple[re.Pattern[str], ...] = ()
        self.keys = quality_keys("?")
        self.broken: dict[str, dict[str, Any]] = {}  # url -> record, to send
        self.mended: dict[str, str] = {}  # url -> pattern: pages known broken that are healthy again, to send
        self.timer: task.LoopingCall | None = None
        crawler.signals.connect(self.page_done, signal=crawlhub_signals.page_done)
        crawler.signals.connect(self.spider_opened, signal=signals.spider_opened)
        crawler.signals.connect(self.spider_closed, signal=signals.spider_closed)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> QualityMonitor:
        return cls(crawler)

    def spider_opened(self, spider: Any) -> None:
        self.rules = spider_rules(spider)
        self.keys = quality_keys(spider.name)
        if self.interval > 0:
            self.timer = task.LoopingCall(self.flush)
            self.timer.start(self.interval, now=False)

    def spider_closed(self, spider: Any) -> None:
        if self.timer is not None and self.timer.running:
            self.timer.stop()
        self.flush()

    # -- judging a page -------------------------------------------------------------------------------
    def verdict(self, status: int | None, items: int, invalid: int, known: dict[str, Any]) -> tuple[str, str]:
        """('healthy' | 'broken' | 'degraded', why)."""
        if status in (404, 410):
            return "healthy", f"answered {status}: its items are gone"
        before = known.get("items") or 0
        if before and items < before * self.min_share:
            return "broken", (f"yielded {before} item(s) at its last healthy fetch, {items} now" if items else
                              f"yielded {before} item(s) at its last healthy fetch, none now")
        if invalid:
            return "degraded", f"{invalid} of its {items} item(s) quarantined"
        return "healthy", ""

    def page_done(self, request: Any, status: int | None, items: int, invalid: int, after_store: list[Any]) -> None:
        known = request.meta.get(meta.STATUS) or {}
        state, why = self.verdict(status, items, invalid, known)
        stats = self.crawler.stats
        stats.inc_value(f"quality/pages/{state}")
        for update in after_store:
            if isinstance(update, GoneCheck) and state != "healthy":
                update.skip = why
            elif isinstance(update, StatusUpdate):
                if state == "broken":
                    update.broken = why
                    update.interval = float(known.get("interval") or update.interval)
                elif state == "healthy" and status not in (404, 410):
                    update.items = items
        if state == "broken":
            logger.debug("Extraction broken on %s: it %s; its items are not marked gone, it stays due", request.url,
                         why)
            self.broken[request.url] = {"url": request.url, "pattern": url_pattern(request.url, self.rules),
                                        "why": why, "since": time.time(), "status": status}
        elif state == "degraded":
            logger.info("%s: %s; its items are not marked gone (crawlhub quarantine)", request.url, why)
        elif known.get("broken") or request.url in self.broken:
            self.broken.pop(request.url, None)
            self.mended[request.url] = url_pattern(request.url, self.rules)

    # -- sending ----------------------------------------------------------------------------------------
    def flush(self) -> None:
        if not (self.broken or self.mended):
            return
        frontier = frontier_of(self.crawler)
        if frontier is None:
            return
        broken, mended = self.broken, self.mended
        self.broken, self.mended = {}, {}
        try:
            self._send(frontier.server, broken, mended)
        except REDIS_ERRORS as exc:  # sent again with the next flush
            logger.warning("Quality records not sent (Redis unavailable: %s); sent with the next flush", exc)
            self.broken = {**broken, **self.broken}
            self.mended = {**mended, **self.mended}

    def _send(self, server: Any, broken: dict[str, dict[str, Any]], mended: dict[str, str]) -> None:
        """One pipeline: the mended pages out, the broken ones in, an event per pattern opened if none is."""
        keys = self.keys
        events: dict[str, dict[str, Any]] = {}
        for record in broken.values():
            events.setdefault(record["pattern"], {"pattern": record["pattern"], "what": "extraction broken",
                                                  "since": record["since"], "example": record["url"],
                                                  "why": record["why"]})
        pipe = server.pipeline(transaction=False)
        for url, record in broken.items():
            pipe.hsetnx(keys["broken"], url, json.dumps(record))
        for pattern, event in events.items():
            pipe.hsetnx(keys["events"], pattern, json.dumps(event))
        pipe.hlen(keys["broken"])
        if mended:
            pipe.hdel(keys["broken"], *mended)
            pipe.hgetall(keys["events"])
        out = pipe.execute()
        opened = out[len(broken):len(broken) + len(events)]
        for event, new in zip(events.values(), opened, strict=True):
            if new:  # this worker opened it: the one line
                logger.warning("Extraction broken on pages like %s (%s, e.g. %s): their items are not marked gone "
                               "and they stay due; `crawlhub quality %s --broken` lists them", event["pattern"],
                               event["why"], event["example"], self.crawler.spider.name)
        recorded = out[len(broken) + len(events)]
        if recorded > self.broken_max:
            logger.warning("%d broken pages recorded for %s (QUALITY_BROKEN_MAX %d)", recorded,
                           self.crawler.spider.name, self.broken_max)
        if mended and out[-1]:
            self._close_mended(server, {k.decode(): v for k, v in out[-1].items()}, set(mended.values()))

    def _close_mended(self, server: Any, events: dict[str, bytes], patterns: set[str]) -> None:
        """Close the events of ``patterns`` that have no broken page left."""
        candidates = [p for p in patterns if p in events]
        if not candidates:
            return
        still = {json.loads(raw).get("pattern") for raw in server.hvals(self.keys["broken"])}
        for pattern in candidates:
            if pattern in still:
                continue
            event = json.loads(events[pattern])
            if server.hdel(self.keys["events"], pattern):  # one worker closes it
                event["closed"] = time.time()
                server.pipeline(transaction=False).lpush(self.keys["closed"], json.dumps(event)).ltrim(
                    self.keys["closed"], 0, CLOSED_MAX - 1).execute()
                logger.warning("Extraction of pages like %s is healthy again (broken since %s)", pattern,
                               time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(event["since"])))
