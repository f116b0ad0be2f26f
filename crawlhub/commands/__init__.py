"""crawlhub's versions of Scrapy's commands (COMMANDS_MODULE = "crawlhub.commands").

* ``scrapy crawl`` checks that Redis answers before the crawl starts: a dead
  server, a wrong address or a refused password ends in one line that names
  it (password redacted) and exit code 2, not a chain of tracebacks.
* ``scrapy shell``, ``check``, ``parse``, ``fetch`` and ``view`` look at pages;
  they never join the shared frontier: Scrapy's own in-memory scheduler,
  no seeds read, no worker record, no stats or items written
  (CRAWLHUB_SHARED = False).
"""

from __future__ import annotations

import argparse
from typing import Any

from scrapy.commands import ScrapyCommand

LOCAL_ONLY = {
    "CRAWLHUB_SHARED": False,
    "SCHEDULER": "scrapy.core.scheduler.Scheduler",
    "DUPEFILTER_CLASS": "scrapy.dupefilters.RFPDupeFilter",
    "ITEM_PIPELINES": {},
}


def local_only(base: type[ScrapyCommand], module: str, **extra: Any) -> type[ScrapyCommand]:
    """``base`` (a Scrapy command class) that never touches the shared frontier or the store."""

    class Command(base):  # type: ignore[valid-type,misc]  # (a class given at run time)
        def process_options(self, args: list[str], opts: argparse.Namespace) -> None:
            super().process_options(args, opts)
            # at command-line priority: the project's settings.py would win over default_settings
            for name, value in {**LOCAL_ONLY, **extra}.items():
                self.settings.set(name, value, priority="cmdline")

    Command.__doc__ = base.__doc__
    Command.__name__ = Command.__qualname__ = "Command"
    Command.__module__ = module  # Scrapy finds a command class by its module's name
    return Command
