"""WorkerRegistry: each worker's heartbeat and counters in ``<spider>:workers``.

A hash field per worker (``host:pid``) holding JSON: state (running or
finished), start time, last heartbeat, pages fetched, items scraped, the leases
it holds, the Redis commands its clients sent (in all, and per second since the
last heartbeat; once finished, over the whole run) and, once closed, the close reason. ``crawlhub status`` and the
demo read it; the other workers read the leases (an idle check's cheap sign).
"""

from __future__ import annotations

import json
import logging
import os
import socket
import time
from typing import TYPE_CHECKING, Any

import redis
from scrapy import Spider, signals
from scrapy.crawler import Crawler
from scrapy.exceptions import NotConfigured
from scrapy.http import Request, Response
from twisted.internet import task

from crawlhub.components import frontier_of, redis_of
from crawlhub.connection import REDIS_COMMANDS_STAT, worker_id
from crawlhub.frontier.keys import spider_keys

if TYPE_CHECKING:
    from typing_extensions import Self

logger = logging.getLogger(__name__)


def workers_key(spider_name: str) -> str:
    return spider_keys(spider_name).workers


class WorkerRegistry:
    def __init__(self, crawler: Crawler, interval: float) -> None:
        self.crawler = crawler
        self.interval = interval
        self.worker = worker_id()
        self.started = time.time()
        self.server: redis.Redis | None = None
        self.timer: task.LoopingCall | None = None
        self.pages = 0
        self._started_at = time.monotonic()
        self._commands = (self._started_at, 0)  # (when, the commands counted then): the rate's last reading
        crawler.signals.connect(self.response_received, signal=signals.response_received)
        crawler.signals.connect(self.spider_opened, signal=signals.spider_opened)
        crawler.signals.connect(self.spider_closed, signal=signals.spider_closed)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        interval = crawler.settings.getfloat("WORKER_HEARTBEAT_INTERVAL")
        if not crawler.settings.getbool("CRAWLHUB_SHARED", True):
            raise NotConfigured("not a worker of the shared frontier (shell, check, parse...)")
        if interval <= 0:
            raise NotConfigured("WORKER_HEARTBEAT_INTERVAL is 0")
        return cls(crawler, interval)

    def record(self, state: str, reason: str | None = None) -> dict[str, Any]:
        stats = self.crawler.stats
        now, sent = time.monotonic(), int(stats.get_value(REDIS_COMMANDS_STAT, 0))
        # running: the rate since the last heartbeat; finished: over the whole run (the last beat comes moments
        # after the one before, and the close's give-back and last flush would read as a burst)
        last_at, last_sent = self._commands if state == "running" else (self._started_at, 0)
        self._commands = (now, sent)
        return {
            "worker": self.worker,
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "state": state,
            "reason": reason,
            "started_at": self.started,
            "last_beat": time.time(),
            "pages": self.pages,
            "items": stats.get_value("item_scraped_count", 0),
            "errors": stats.get_value("log_count/ERROR", 0),
            "leases": frontier.leases_held if (frontier := frontier_of(self.crawler)) is not None else 0,
            "capabilities": list(frontier.roles.own) if frontier is not None else [],  # (the lanes it takes)
            # Redis commands this worker's clients sent: in all, and per second since the last heartbeat
            "redis_commands": sent,
            "redis_per_s": round((sent - last_sent) / (now - last_at), 1) if now > last_at else 0.0,
        }

    def beat(self, state: str = "running", reason: str | None = None) -> None:
        spider = self.crawler.spider
        try:
            assert spider is not None and self.server is not None
            self.server.hset(workers_key(spider.name), self.worker, json.dumps(self.record(state, reason)))
        except Exception as exc:  # a missed heartbeat must not stop the crawl
            logger.warning("Heartbeat to Redis failed: %s", exc)

    def response_received(self, response: Response, request: Request, spider: Spider | None=None) -> None:
        if not request.meta.get("dont_obey_robotstxt"):  # robots.txt is not a page
            self.pages += 1

    def spider_opened(self, spider: Spider) -> None:
        self.server = redis_of(self.crawler)
        self.beat()
        self.timer = task.LoopingCall(self.beat)
        self.timer.start(self.interval, now=False)

    def spider_closed(self, spider: Spider, reason: str) -> None:
        if self.timer is not None and self.timer.running:
            self.timer.stop()
        self.beat("finished", reason)
