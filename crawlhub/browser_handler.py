"""BrowserDownloadHandler: scrapy-playwright on Debian's Chromium (see crawlhub.browser).

A module of its own so that workers that never use the browser never import Playwright.
"""

from __future__ import annotations

import logging
from typing import Any

from scrapy import Spider
from scrapy.crawler import Crawler
from scrapy_playwright.handler import ScrapyPlaywrightDownloadHandler

from crawlhub._compat import browser_version, check_playwright_handler
from crawlhub.browser import CHROMIUM_ARGS, browser_user_agent, chromium_path
from crawlhub.impersonate import Impersonating, Impersonator

check_playwright_handler(ScrapyPlaywrightDownloadHandler)  # a release without what we override: say so now

logger = logging.getLogger(__name__)


class BrowserDownloadHandler(Impersonating, ScrapyPlaywrightDownloadHandler):  # type: ignore[misc]  # (untyped: scrapy-playwright)
    def __init__(self, crawler: Crawler) -> None:
        super().__init__(crawler)
        settings = crawler.settings
        options = dict(self.config.launch_options)
        options.setdefault("executable_path", chromium_path(settings))
        options.setdefault("headless", True)
        options["args"] = [*CHROMIUM_ARGS, *options.get("args", [])]
        options.setdefault("timeout", settings.getfloat("BROWSER_LAUNCH_TIMEOUT") * 1000)
        self.config.launch_options = options
        self.verify_tls = settings.getbool("TLS_VERIFY")
        self.impersonator = Impersonator(crawler)
        aborted = frozenset(settings.getlist("BROWSER_ABORT_RESOURCES"))

        def abort(request: Any) -> bool:  # a Playwright request
            return bool(request.resource_type in aborted)

        if aborted and getattr(self, "abort_request", None) is None:
            self.abort_request = abort
        # one handler per scheme (http, https), one browser line per worker: the stats say whether it was logged
        if crawler.stats.get_value("browser/executable") is None:
            crawler.stats.set_value("browser/executable", options["executable_path"])
            logger.info("Browser: %s (headless), at most %d contexts x %d pages, aborting %s",
                        options["executable_path"], self.config.max_contexts or 0, self.config.max_pages_per_context,
                        ", ".join(sorted(aborted)) or "nothing")

    async def _create_browser_context(self, name: str, context_kwargs: dict[str, Any] | None,
                                      spider: Spider | None = None) -> Any:
        # every context (one per proxy) shows Chromium's User-Agent without "Headless"
        kwargs = dict(context_kwargs or {})
        # certificates: verified only with TLS_VERIFY, as for plain downloads (Scrapy does not verify by default)
        kwargs.setdefault("ignore_https_errors", not self.verify_tls)
        if "user_agent" not in kwargs:
            kwargs["user_agent"] = browser_user_agent(await browser_version(self))
        return await super()._create_browser_context(name, kwargs, spider)
