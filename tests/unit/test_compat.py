"""The private APIs of Scrapy and scrapy-playwright that crawlhub uses (crawlhub/_compat.py) still exist.

Each test names the attribute, so an upgrade that removes one fails here, loudly, not in a crawl."""

from __future__ import annotations

import inspect

import pytest
from scrapy import Spider
from scrapy.utils.test import get_crawler

from crawlhub import _compat


def test_scrapy_engine_slot_nextcall_wakes_the_engine():
    """Scrapy's private engine._slot.nextcall (the scheduler's poller wakes an idle worker with it)."""
    from scrapy.core.engine import ExecutionEngine, _Slot

    assert "self._slot" in inspect.getsource(ExecutionEngine), "ExecutionEngine._slot is gone (crawlhub/_compat.py)"
    assert "self.nextcall" in inspect.getsource(_Slot.__init__), "engine _Slot.nextcall is gone (crawlhub/_compat.py)"
    crawler = get_crawler(Spider)
    crawler.engine = crawler._create_engine()
    assert crawler.engine._slot is None and not _compat.wake_engine(crawler), "before the spider opens: no-op"
    calls = []

    class NextCall:  # the shape of Scrapy's CallLaterOnce
        def schedule(self, delay=0):
            calls.append(delay)

    class Slot:
        nextcall = NextCall()

    crawler.engine._slot = Slot()
    assert _compat.wake_engine(crawler) and calls == [0]


def test_scrapy_engine_slot_inprogress_holds_the_requests_of_the_engine():
    """Scrapy's private engine._slot.inprogress (the lease warden's sweep reads it): a request is in it from
    the start of its download until its callback's output is consumed."""
    from scrapy.core.engine import ExecutionEngine, _Slot

    assert "self.inprogress" in inspect.getsource(_Slot.__init__), "engine _Slot.inprogress is gone (crawlhub/_compat.py)"
    assert "add_request(request)" in inspect.getsource(ExecutionEngine._download), "the engine no longer adds a download"
    assert "_remove_request" in inspect.getsource(ExecutionEngine._start_scheduled_request), (
        "the engine no longer removes a request after its output is handled")
    crawler = get_crawler(Spider)
    crawler.engine = crawler._create_engine()
    assert _compat.in_progress(crawler) is None, "before the spider opens: unknown"

    class Slot:
        inprogress = {"a request"}

    crawler.engine._slot = Slot()
    assert _compat.in_progress(crawler) == {"a request"}


def test_scrapy_crawl_makes_its_crawler_through_create_crawler():
    """Scrapy's private BaseRunSpiderCommand._create_crawler (crawlhub's crawl command leaves the crawler the Redis
    client its checks connected through it): `scrapy crawl` makes its crawler there, and the override is called."""
    from scrapy.commands import BaseRunSpiderCommand
    from scrapy.commands.crawl import Command as ScrapyCrawl

    from crawlhub.commands.crawl import Command

    assert "_create_crawler(" in inspect.getsource(ScrapyCrawl.run), "scrapy crawl no longer makes its crawler there"
    assert list(inspect.signature(BaseRunSpiderCommand._create_crawler).parameters) == ["self", "spidercls"]
    assert Command._create_crawler is not BaseRunSpiderCommand._create_crawler


def test_scrapy_playwright_handler_has_what_crawlhub_overrides():
    from scrapy_playwright.handler import ScrapyPlaywrightDownloadHandler

    _compat.check_playwright_handler(ScrapyPlaywrightDownloadHandler)  # raises, naming what is gone
    source = inspect.getsource(ScrapyPlaywrightDownloadHandler)
    for name in _compat.PLAYWRIGHT_INSTANCE:
        assert f"self.{name}" in source, f"ScrapyPlaywrightDownloadHandler.{name} is gone (crawlhub/_compat.py)"


def test_a_release_without_them_is_named():
    class Changed:
        async def _create_browser_context(self, name, spider=None):  # context_kwargs dropped
            pass

    with pytest.raises(_compat.IncompatibleRelease, match=r"_create_browser_context takes \['name', 'spider'\]"):
        _compat.check_playwright_handler(Changed)

    class Gone:
        pass

    with pytest.raises(_compat.IncompatibleRelease, match="_maybe_launch_browser .a coroutine method. is gone"):
        _compat.check_playwright_handler(Gone)
