"""Refresher: one worker at a time moves the pages that are due into the Redis frontier.

Every REFRESH_INTERVAL seconds each worker of a spider with a revisit policy
tries the lock ``<spider>:refresher`` (SET NX with a TTL of
REFRESH_LOCK_TTL seconds, renewed while it holds it); the holder reads up to
REFRESH_BATCH due pages from the status store and queues them
(``lua/refresh.lua``) through the same per-domain queues as any request, so
politeness holds and the in-cycle duplicate filter is bypassed (a revisit
is ``dont_filter``). If the holder dies, its lock expires and another worker
takes over.

Exactly once per due time: the script queues a page only if
``<spider>:revisits`` does not already record that due time for it, and
records it in the same atomic step; only then does the store move the
page's next fetch time (to REVISIT_REQUEUE_AFTER from now, in case the
revisit is lost; its fetch sets the real one). A refresher that dies
between the two leaves the page due in the store; the next one reads it
again, the script skips it (already queued for that due time), and the
store is updated.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from typing import Any

from scrapy import signals
from scrapy.crawler import Crawler
from twisted.internet import task, threads

from crawlhub import meta
from crawlhub.components import frontier_of
from crawlhub.connection import REDIS_ERRORS, get_mongo
from crawlhub.revisit.policy import RevisitPolicy
from crawlhub.revisit.store import DueScanner, StatusStore

logger = logging.getLogger(__name__)


def revisit_page(doc: dict[str, Any]) -> dict[str, Any]:
    """A due page as the refresh script takes it (lua/refresh.lua)."""
    data = json.loads(doc["request"])
    return {"fp": doc["fp"], "due": doc["next_fetch"], "payload": revisit_payload(doc, data),
            "priority": int(data.get("priority", 0)), "domain": doc.get("domain") or "?"}


def revisit_payload(doc: dict[str, Any], data: dict[str, Any] | None = None) -> str:
    """The request a due page is queued as: its stored request, with what the store knows of it."""
    data = json.loads(doc["request"]) if data is None else data
    data.setdefault("meta", {})[meta.STATUS] = {
        # the record's fingerprint and counts: a fetch whose fingerprint is another today (the fingerprinter reads a
        # URL otherwise since: an upgrade, URL_TRACKING_PARAMS, a project's own) moves the record to it, counts and all
        "fp": doc.get("fp"), "fetches": doc.get("fetches"), "changes": doc.get("changes"),
        "unchanged": doc.get("unchanged"), "first_fetch": doc.get("first_fetch"),
        "etag": doc.get("etag"), "last_modified": doc.get("last_modified"), "signature": doc.get("signature"),
        "interval": doc.get("interval"), "due": doc.get("next_fetch"), "items": doc.get("items"),
        "broken": doc.get("broken"), "degraded": doc.get("degraded"),
    }
    data["dont_filter"] = True
    return json.dumps(data, separators=(",", ":"), ensure_ascii=False)


class Refresher:
    def __init__(self, crawler: Crawler) -> None:
        settings = crawler.settings
        self.crawler = crawler
        self.interval = settings.getfloat("REFRESH_INTERVAL", 5.0)
        self.batch = settings.getint("REFRESH_BATCH", 500)
        self.lock_ttl = settings.getfloat("REFRESH_LOCK_TTL", 30.0)
        self.requeue_after = settings.getfloat("REVISIT_REQUEUE_AFTER", 86400.0)
        self.timer: task.LoopingCall | None = None
        self.store: StatusStore | None = None
        self.scanner: DueScanner | None = None
        self.client: Any = None
        self.running = False
        self.holding = False
        crawler.signals.connect(self.spider_opened, signal=signals.spider_opened)
        crawler.signals.connect(self.spider_closed, signal=signals.spider_closed)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Refresher:
        return cls(crawler)

    def spider_opened(self, spider: Any) -> None:
        policy = RevisitPolicy.for_spider(spider, self.crawler.settings)
        if not policy.enabled or frontier_of(self.crawler) is None or self.interval <= 0:
            return  # one-shot (declares no revisit), or not on the shared frontier
        settings = self.crawler.settings
        self.client = get_mongo(settings)
        self.store = StatusStore.of(self.client, settings)
        self.timer = task.LoopingCall(self.tick)
        self.timer.start(self.interval, now=True)

    def spider_closed(self, spider: Any) -> None:
        if self.timer is not None and self.timer.running:
            self.timer.stop()
        frontier = frontier_of(self.crawler)
        if self.holding and frontier is not None:
            with contextlib.suppress(*REDIS_ERRORS):  # else it expires
                if frontier.server.get(frontier.keys.refresher) == frontier.worker.encode():
                    frontier.server.delete(frontier.keys.refresher)
        if self.client is not None:
            self.client.close()

    def tick(self) -> Any:
        """One look (in a thread: MongoDB and Redis calls block)."""
        if self.running:
            return None
        self.running = True
        d = threads.deferToThread(self.refresh)
        d.addErrback(lambda failure: logger.warning("Refresher: %s; trying again in %gs",
                                                    failure.getErrorMessage(), self.interval))
        d.addBoth(self._done)
        return None

    def _done(self, result: Any) -> None:
        self.running = False

    def refresh(self) -> int:
        """If this worker holds (or takes) the lock: queue the due pages, batch after batch. Returns the pages queued."""
        frontier = frontier_of(self.crawler)
        if frontier is None or self.store is None:
            return 0
        server, lock = frontier.server, frontier.keys.refresher
        ttl_ms = int(self.lock_ttl * 1000)
        if server.set(lock, frontier.worker, nx=True, px=ttl_ms):
            self.holding = True
        elif server.get(lock) == frontier.worker.encode():
            server.pexpire(lock, ttl_ms)
            self.holding = True
        else:
            self.holding = False
            return 0
        queued = 0
        if self.scanner is None:
            self.scanner = DueScanner(self.store, frontier.spider_name, self.batch)
        while True:
            now = time.time()
            try:
                due = self.scanner.next_batch(now)
            except Exception:
                self.scanner.reset()
                raise
            if not due:
                break
            pages = [revisit_page(d) for d in due]
            try:
                moved = set(frontier.ops.refresh(pages))
                self.store.queued([(d["_id"], d["next_fetch"]) for d in due], now, self.requeue_after)
            except Exception:
                self.scanner.reset()  # the pages it read stay due: read them again from the start
                raise
            queued += len(moved)
            self.crawler.stats.inc_value("revisit/queued", len(moved))
            if len(due) < self.batch and self.scanner.caught_up:
                break
            server.pexpire(lock, ttl_ms)
        if queued:
            logger.info("Refresher: %d due pages queued for a revisit", queued)
        return queued
