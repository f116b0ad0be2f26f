"""`scrapy crawl` that first checks what would make a worker fail at once (see crawlhub.commands):
Redis answers (address, password), and this worker's duplicate-filter settings are those of the crawl."""

from __future__ import annotations

import sys

from scrapy.commands.crawl import Command as _Base

from crawlhub.addon import apply_spider, install
from crawlhub.connection import Unreachable, connect_redis
from crawlhub.frontier.dupefilter import FilterMismatch, make_filter


class Command(_Base):
    def run(self, args, opts):
        if self.settings.getbool("CRAWLHUB_SHARED", True) and args:
            try:
                self.preflight(args[0])
            except (Unreachable, FilterMismatch) as exc:
                print(f"crawlhub: {exc}", file=sys.stderr)
                self.exitcode = 2
                return
        super().run(args, opts)

    def preflight(self, spider_name: str) -> None:
        try:
            spidercls = self.crawler_process.spider_loader.load(spider_name)
        except KeyError:
            return  # Scrapy says so itself
        settings = self.settings.copy()  # as the crawl will have them: the spider's, then crawlhub's
        spidercls.update_settings(settings)
        install(settings)
        apply_spider(settings, spidercls)
        server = connect_redis(settings)
        try:
            make_filter(server, settings, settings.get("SCHEDULER_DUPEFILTER_KEY") % {"spider": spider_name})
        finally:
            server.close()
