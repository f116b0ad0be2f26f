"""Calling a spider's hooks (``session_expired``, ``is_blocked``, ``login``): an error in one is the spider's.

crawlhub calls some of a spider's methods itself, from its middlewares. One that raises is reported the way
Scrapy reports a callback's error ("Spider error processing"): one ERROR in the spider's log, with the
traceback, naming ``<SpiderClass>.<hook>`` and the URL, counted in ``spider_exceptions/<Error>``; and the page
it was called for ends with a reason that says the same (``spider hook QuotesSpider.session_expired raised
NotSupported: Response content isn't text``): the dead-letter list for a page of the shared frontier (a mistake
in the spider would repeat: the page is not tried again), as Scrapy drops a page whose callback raised.
"""

from __future__ import annotations

import logging
from typing import Any

from scrapy.exceptions import IgnoreRequest
from scrapy.http import Request

from crawlhub import intent
from crawlhub._utils.errors import failure_text

logger = logging.getLogger(__name__)


class SpiderHookError(Exception):
    """A spider's hook raised; the message names the spider's class, the hook and the error."""


def hook_failed(spider: Any, hook: str, error: BaseException, url: str) -> SpiderHookError:
    """Report ``error``, raised by ``spider``'s ``hook`` called for ``url``, as the spider's error (logged with its
    traceback, counted); the exception that says so in one line."""
    where = f"{type(spider).__name__}.{hook}"
    getattr(spider, "logger", logger).error("Spider error in %s processing %s", where, url, exc_info=error)
    crawler = getattr(spider, "crawler", None)
    if crawler is not None and crawler.stats is not None:
        crawler.stats.inc_value(f"spider_exceptions/{type(error).__name__}")
    return SpiderHookError(f"spider hook {where} raised {failure_text(error)}")


def call_hook(spider: Any, hook: str, *args: Any, url: str) -> Any:
    """``spider.<hook>(*args)``, whatever it returns; an error in it becomes :class:`SpiderHookError` (reported)."""
    try:
        return getattr(spider, hook)(*args)
    except Exception as exc:  # noqa: BLE001 - any mistake of the spider's, reported as its own
        raise hook_failed(spider, hook, exc, url) from exc


def end_page(request: Request, error: SpiderHookError, status: int | None = None) -> Request:
    """What a downloader middleware returns for the page a spider hook failed on: the page to the dead-letter list
    with the hook's error as the reason (off the shared frontier: IgnoreRequest with it)."""
    if intent.leased(request):
        return intent.dead_letter(request, str(error), status=status)
    raise IgnoreRequest(str(error))
