"""QualityWebhook: data-quality events and change alerts, POSTed as JSON to a URL (a Slack incoming webhook,
an alert manager, your own service).

Listens to ``crawlhub.signals.quality_events`` (sent by the worker that opened or closed an event, or raised a
change alert: each event is posted once for the whole cluster). ``QUALITY_WEBHOOK_URL`` ("" = off; set it in
the environment: a Slack URL is a secret, and only its host is ever logged) receives, per signal, one POST:

* ``QUALITY_WEBHOOK_FORMAT = "json"``: ``{"source": "crawlhub", "spider": ..., "events": [...]}``, each event as
  ``crawlhub quality --json`` shows it, with its ``state`` (``opened``, ``closed``, ``alert``);
* ``"slack"``: ``{"text": "..."}``, one line per event (Slack, Mattermost, Rocket.Chat, Discord's /slack).

The POST runs in a thread (the crawl never waits for it), ``QUALITY_WEBHOOK_TIMEOUT`` seconds at most per try;
a failed try (no answer, a 5xx or 429) is tried again after 1, 2, 4... seconds, ``QUALITY_WEBHOOK_RETRIES``
times, then logged as lost (the event itself stays in Redis: ``crawlhub quality`` shows it). A 4xx other than
429 is not tried again. At close, the worker waits for the posts under way.
"""

from __future__ import annotations

import json
import logging
import urllib.error
import urllib.request
from typing import Any
from urllib.parse import urlsplit

from scrapy import signals
from scrapy.crawler import Crawler
from scrapy.exceptions import NotConfigured
from twisted.internet import defer, task, threads

from crawlhub import signals as crawlhub_signals

logger = logging.getLogger(__name__)

FORMATS = ("json", "slack")  # QUALITY_WEBHOOK_FORMAT
SCHEMES = ("http", "https")  # QUALITY_WEBHOOK_URL's


def slack_text(event: dict[str, Any]) -> str:
    state = event.get("state", "opened")
    mark = {"opened": ":red_circle:", "closed": ":large_green_circle:", "alert": ":warning:"}.get(state, "")
    head = f"{mark} crawlhub {event.get('spider', '?')}: "
    if state == "alert":
        return head + f"change alert on {event.get('subject')}: {event.get('why')} ({event.get('url')})"
    example = f" (e.g. {event['example']})" if event.get("example") else ""
    return head + f"{event.get('what')} {'HEALTHY AGAIN' if state == 'closed' else ''}".strip() + \
        f": {event.get('why')}{example}"


def payload(events: list[dict[str, Any]], spider: str, style: str) -> bytes:
    if style == "slack":
        return json.dumps({"text": "\n".join(slack_text(e) for e in events)}).encode()
    return json.dumps({"source": "crawlhub", "spider": spider, "events": events}, default=str).encode()


class QualityWebhook:
    def __init__(self, crawler: Crawler) -> None:
        settings = crawler.settings
        self.url = settings.get("QUALITY_WEBHOOK_URL") or ""
        if not self.url:
            raise NotConfigured  # off (the default): nothing to say in the log
        if urlsplit(self.url).scheme not in SCHEMES:
            raise NotConfigured(f"QUALITY_WEBHOOK_URL is not an http(s) URL (scheme {urlsplit(self.url).scheme!r})")
        self.style = settings.get("QUALITY_WEBHOOK_FORMAT", "json")
        if self.style not in FORMATS:
            raise NotConfigured(f"QUALITY_WEBHOOK_FORMAT must be {' or '.join(map(repr, FORMATS))}, not {self.style!r}")
        self.timeout = settings.getfloat("QUALITY_WEBHOOK_TIMEOUT", 10.0)
        self.retries = settings.getint("QUALITY_WEBHOOK_RETRIES", 3)
        self.host = urlsplit(self.url).hostname or "?"  # what the log says of the URL (never the URL: a secret)
        self.crawler = crawler
        self.under_way: set[defer.Deferred[Any]] = set()
        crawler.signals.connect(self.quality_events, signal=crawlhub_signals.quality_events)
        crawler.signals.connect(self.spider_closed, signal=signals.spider_closed)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> QualityWebhook:
        return cls(crawler)

    def quality_events(self, events: list[dict[str, Any]]) -> None:
        if not events:
            return
        spider = self.crawler.spider.name if self.crawler.spider else "?"
        body = payload(events, spider, self.style)
        d = defer.ensureDeferred(self._post(body, len(events)))
        self.under_way.add(d)
        d.addBoth(lambda _: self.under_way.discard(d))

    def _send(self, body: bytes) -> int:
        request = urllib.request.Request(self.url, data=body, method="POST",
                                         headers={"Content-Type": "application/json", "User-Agent": "crawlhub"})
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as answer:  # noqa: S310 - http(s) only
                return int(answer.status)
        except urllib.error.HTTPError as exc:
            return int(exc.code)

    async def _post(self, body: bytes, count: int) -> None:
        from twisted.internet import reactor  # the installed one (never at import: Scrapy installs its own)

        stats = self.crawler.stats
        for attempt in range(self.retries + 1):
            if attempt:
                await task.deferLater(reactor, float(2 ** (attempt - 1)), lambda: None)
            try:
                status = await threads.deferToThread(self._send, body)
                why = f"HTTP {status}"
            except OSError as exc:
                status, why = 0, f"{type(exc).__name__}: {str(exc)[:200]}"
            if 200 <= status < 300:
                stats.inc_value("quality/webhook/sent")
                return
            if 400 <= status < 500 and status != 429:
                break
            logger.info("Quality webhook to %s failed (%s); try %d of %d", self.host, why, attempt + 1,
                        self.retries + 1)
        stats.inc_value("quality/webhook/lost")
        logger.warning("Quality webhook to %s lost %d event(s) (%s); `crawlhub quality` still shows them", self.host,
                       count, why)

    def spider_closed(self, spider: Any) -> defer.Deferred[Any] | None:
        if not self.under_way:
            return None
        return defer.DeferredList(list(self.under_way), consumeErrors=True)
