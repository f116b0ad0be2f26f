"""The private APIs of Scrapy and scrapy-playwright that crawlhub relies on, in one place.

Each is used only through this module and has a test (tests/unit/test_compat.py)
that fails, naming the attribute, when a new release removes or changes it.

Scrapy:
* ``engine._slot.nextcall``: asks the engine for requests now. Scrapy asks an
  idle scheduler only on its 5-second heartbeat; on a shared frontier other
  workers push work meanwhile. Without it the heartbeat still works (slower).
* ``engine._slot.inprogress``: the requests the engine holds, from the start
  of their download until their callback's output is consumed. The lease
  warden's sweep ends a lease whose request left it with no end recorded;
  without it the sweep is off (the signals still end most leases).
* ``BaseRunSpiderCommand._create_crawler(spidercls)``: how ``scrapy crawl``
  makes its crawler. crawlhub's crawl command (crawlhub/commands/crawl.py)
  leaves it the Redis client its checks connected, so that a worker connects
  to each Redis node once; without it the scheduler connects again (two
  connections per node at start, as before #30's measurement).

scrapy-playwright (``ScrapyPlaywrightDownloadHandler``):
* ``config`` (launch options, limits) and ``abort_request``: set by crawlhub's
  handler to launch Debian's Chromium offline and skip images and fonts;
* ``_create_browser_context(name, context_kwargs, spider)``: every context
  (one per proxy) gets Chromium's User-Agent without "Headless" and the
  certificate policy of TLS_VERIFY;
* ``_maybe_launch_browser()`` and ``browser``: the running Chromium's version.
"""

from __future__ import annotations

import inspect
from typing import Any

from scrapy.crawler import Crawler

# scrapy-playwright's handler: attribute -> what crawlhub needs of it
PLAYWRIGHT_PRIVATE = {
    "_create_browser_context": ("name", "context_kwargs", "spider"),  # a coroutine method with these parameters
    "_maybe_launch_browser": (),
}
PLAYWRIGHT_INSTANCE = ("config", "abort_request", "browser")  # set in __init__ or at launch


class IncompatibleRelease(RuntimeError):
    """An installed Scrapy or scrapy-playwright lacks a private API crawlhub uses; the message names it."""


def wake_engine(crawler: Crawler) -> bool:
    """Ask the engine for requests now (Scrapy's private ``engine._slot.nextcall``); False if it cannot."""
    slot = getattr(crawler.engine, "_slot", None)
    nextcall = getattr(slot, "nextcall", None)
    if nextcall is None:
        return False
    nextcall.schedule()
    return True


def in_progress(crawler: Crawler) -> set[Any] | None:
    """The requests Scrapy's engine holds now (private ``engine._slot.inprogress``); None if it cannot tell."""
    try:
        engine = crawler.engine
    except RuntimeError:
        return None
    slot = getattr(engine, "_slot", None)
    held = getattr(slot, "inprogress", None)
    return held if isinstance(held, set) else None


def check_playwright_handler(cls: type[Any]) -> None:
    """Raise :class:`IncompatibleRelease` naming what scrapy-playwright's handler no longer has."""
    problems = []
    for name, params in PLAYWRIGHT_PRIVATE.items():
        method = getattr(cls, name, None)
        if method is None or not inspect.iscoroutinefunction(method):
            problems.append(f"{cls.__name__}.{name} (a coroutine method) is gone")
            continue
        have = list(inspect.signature(method).parameters)[1:]
        if have[: len(params)] != list(params):
            problems.append(f"{cls.__name__}.{name} takes {have}, not {list(params)}")
    if problems:
        raise IncompatibleRelease("scrapy-playwright changed: " + "; ".join(problems) +
                                  " (crawlhub/_compat.py lists what crawlhub needs)")


async def browser_version(handler: Any) -> str:
    """The version of the Chromium the handler runs (launched if need be)."""
    await handler._maybe_launch_browser()
    return str(handler.browser.version)
