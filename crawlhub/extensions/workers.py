"""WorkerRegistry: each worker's heartbeat and counters in ``<spider>:workers``.

A hash field per worker (``host:pid``) holding JSON: state (running or
finished), start time, last heartbeat, pages fetched, items scraped and, once
closed, the close reason. ``crawlhub status`` and the demo read it.
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

from crawlhub.connection import get_redis, worker_id
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
        self.server = get_redis(self.crawler.settings)
        self.beat()
        self.timer = task.LoopingCall(self.beat)
        self.timer.start(self.interval, now=False)

    def spider_closed(self, spider: Spider, reason: str) -> None:
        if self.timer is not None and self.timer.running:
            self.timer.stop()
        self.beat("finished", reason)
