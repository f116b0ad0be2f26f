"""`scrapy crawl` that first checks what would make a worker fail at once, or crawl wrongly without a word
(see crawlhub.commands): each problem is one line on stderr and exit code 2, before anything is fetched.

* the settings read (an environment variable that is not of its setting's type) and are within their ranges
  (crawlhub.config.check_settings: a FRONTIER_PARTITIONS of -3, a LEASE_TTL of 0);
* Redis answers (address, password; a malformed REDIS_URL is named);
* this worker's duplicate-filter settings are those of the crawl;
* scrapy-redis settings crawlhub cannot honour (crawlhub.habits);
* the spider's revisit durations parse (docs/revisit.md);
* MongoDB answers, when MONGO_URI names one and the MongoDB pipeline is on (the embedded one starts with the
  worker): if not, a warning says what the worker will do (hold items, keep their leases), or with
  MONGO_STARTUP_WAIT > 0 the worker waits that long and stops.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from scrapy.commands.crawl import Command as _Base

from crawlhub.addon import install, worker_settings
from crawlhub.config import SettingError, check_settings
from crawlhub.connection import BadURL, CommandCounter, Unreachable, check_mongo, connect_redis, hand_over
from crawlhub.frontier.dupefilter import FilterMismatch, make_filter
from crawlhub.revisit.policy import BadDuration, RevisitPolicy

MONGO_PIPELINE = "crawlhub.pipelines.mongo.MongoPipeline"


class Refused(Exception):
    """A setting crawlhub cannot honour; the message says which and what to use instead."""


class Command(_Base):
    # the Redis client the checks connected, left to the crawler Scrapy makes next (its scheduler takes it over)
    checked: tuple[Any, Any, CommandCounter] | None = None

    def process_options(self, args: list[str], opts: argparse.Namespace) -> None:
        super().process_options(args, opts)
        assert self.settings is not None
        try:  # before Scrapy builds its crawler process, whose add-on hook would raise it as a traceback
            install(self.settings.copy())
        except SettingError as exc:
            print(f"crawlhub: {exc}", file=sys.stderr)
            sys.exit(2)

    def run(self, args: list[str], opts: argparse.Namespace) -> None:
        assert self.settings is not None
        if self.settings.getbool("CRAWLHUB_SHARED", True) and args:
            try:
                self.preflight(args[0])
            except (Unreachable, FilterMismatch, BadURL, BadDuration, Refused) as exc:
                if self.checked is not None:  # (MongoDB's check failed after Redis's)
                    self.checked[0].close()
                    self.checked = None
                print(f"crawlhub: {exc}", file=sys.stderr)
                self.exitcode = 2
                return
        super().run(args, opts)

    def _create_crawler(self, spidercls: Any) -> Any:
        """Scrapy's crawler, given the Redis client the checks connected (crawlhub.connection.hand_over)."""
        crawler = super()._create_crawler(spidercls)
        if self.checked is not None:
            server, settings, counter = self.checked
            self.checked = None
            hand_over(crawler, server, settings, counter)
        return crawler

    def preflight(self, spider_name: str) -> None:
        assert self.crawler_process is not None and self.settings is not None
        try:
            spidercls = self.crawler_process.spider_loader.load(spider_name)
        except KeyError:
            return  # Scrapy says so itself
        settings = worker_settings(self.settings, spidercls)  # as the crawl will have them
        refused = settings.getlist("CRAWLHUB_REFUSED") + check_settings(settings)
        if refused:
            raise Refused("\ncrawlhub: ".join(refused))
        RevisitPolicy.for_spider(spidercls, settings)
        counter = CommandCounter()  # (the crawler's stats, once its scheduler takes the client over)
        server = connect_redis(settings, counter)
        try:
            make_filter(server, settings, settings.get("SCHEDULER_DUPEFILTER_KEY") % {"spider": spider_name})
        except BaseException:
            server.close()
            raise
        self.checked = (server, settings, counter)
        if settings.get("MONGO_URI") and settings.getdict("ITEM_PIPELINES").get(MONGO_PIPELINE) is not None:
            try:
                check_mongo(settings)
            except Unreachable as exc:
                if settings.getfloat("MONGO_STARTUP_WAIT") > 0:
                    raise
                print(f"crawlhub: WARNING: {exc}; starting anyway: items wait in memory (up to MONGO_BUFFER_MAX) and "
                      "their pages keep their leases until MongoDB answers (MONGO_STARTUP_WAIT > 0 stops the "
                      "worker instead)", file=sys.stderr)
