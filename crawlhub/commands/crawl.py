"""`scrapy crawl` that first checks Redis answers (see crawlhub.commands)."""

from __future__ import annotations

import sys

from scrapy.commands.crawl import Command as _Base

from crawlhub.connection import Unreachable, connect_redis


class Command(_Base):
    def run(self, args, opts):
        if self.settings.getbool("CRAWLHUB_SHARED", True):
            try:
                connect_redis(self.settings).close()
            except Unreachable as exc:
                print(f"crawlhub: {exc}", file=sys.stderr)
                self.exitcode = 2
                return
        super().run(args, opts)
