"""`scrapy crawl` that first checks what would make a worker fail at once, or crawl wrongly without a word
(see crawlhub.commands): each problem is one line on stderr and exit code 2, before anything is fetched.

* the spider is one of the project's (else its name and the project's spiders);
* every setting crawlhub reads is one its setting accepts (crawlhub.settings_check: an environment variable
  that is not of its setting's type, a FRONTIER_PARTITIONS of -3, a LEASE_TTL of 0, a DOMAIN_RATE of "fast"),
  before Redis is reached or an embedded server started;
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
from crawlhub.config import SettingError
from crawlhub.connection import BadURL, CommandCounter, Unreachable, check_mongo, connect_redis, hand_over
from crawlhub.frontier.dupefilter import FilterMismatch, make_filter
from crawlhub.revisit.policy import BadDuration, RevisitPolicy
from crawlhub.settings_check import check_settings

MONGO_PIPELINE = "crawlhub.pipelines.mongo.MongoPipeline"


class Refused(Exception):
    """A setting crawlhub cannot honour, or a spider the project does not have; the message says which and what
    to use instead."""


def refuse(problems: list[str]) -> None:
    if problems:
        raise Refused("\ncrawlhub: ".join(problems))


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
        if len(args) == 1:  # (none or more: Scrapy's usage error)
            try:
                if self.settings.getbool("CRAWLHUB_SHARED", True):
                    self.preflight(args[0])
                else:
                    self.spider_class(args[0])
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

    def spider_class(self, spider_name: str) -> Any:
        """The project's spider of that name, else :class:`Refused` naming the project's spiders."""
        assert self.crawler_process is not None
        loader = self.crawler_process.spider_loader
        try:
            return loader.load(spider_name)
        except KeyError:
            known = sorted(loader.list())
            raise Refused(f"unknown spider {spider_name!r}; " + (f"this project's spiders: {', '.join(known)}" if known
                          else "this project has no spiders (SPIDER_MODULES)")) from None

    def preflight(self, spider_name: str) -> None:
        assert self.settings is not None
        spidercls = self.spider_class(spider_name)
        own = self.settings.copy()  # the spider's, the project's and crawlhub's, before what follows from the spider
        spidercls.update_settings(own)
        install(own)
        refuse(own.getlist("CRAWLHUB_REFUSED") + check_settings(own))
        settings = worker_settings(self.settings, spidercls)  # as the crawl will have them
        refuse(check_settings(settings))  # (the spider's crawlhub_settings hook may have set some)
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
