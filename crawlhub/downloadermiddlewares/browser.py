"""BrowserMiddleware (370): which requests headless Chromium renders, the adaptive fallback,
browser timeouts as retries. The browser's wiring (Chromium, scrapy-playwright settings) is in
:mod:`crawlhub.browser`; docs/browser.md explains when the browser is used.
"""

from __future__ import annotations

import logging
import time

import redis
from scrapy.crawler import Crawler
from scrapy.http import Request, Response, TextResponse

from crawlhub import intent
from crawlhub._utils.urls import domain_of
from crawlhub.browser import COUNTS, HANDLER, MARKED, SAME_PAGE, browser_failure
from crawlhub.components import FrontierMiddleware
from crawlhub.connection import REDIS_ERRORS
from crawlhub.frontier.records import text
from crawlhub.intent import leased
from crawlhub.meta import DOWNLOAD_RUNG
from crawlhub.roles import BROWSER, Roles

logger = logging.getLogger(__name__)

class BrowserMiddleware(FrontierMiddleware):
    """Which requests the browser renders; the fallback; timeouts as retries (order 370, before the proxy and header profile)."""


    def __init__(self, crawler: Crawler) -> None:
        super().__init__(crawler)
        settings = crawler.settings
        self.enabled = any(v == HANDLER for v in settings.getdict("DOWNLOAD_HANDLERS").values())
        self.ratio = settings.getfloat("BROWSER_MARK_RATIO")
        self.min_fallbacks = settings.getint("BROWSER_MARK_MIN_FALLBACKS")
        self.refresh = settings.getfloat("BROWSER_DOMAINS_REFRESH")
        self.marked: set[str] = set()
        self._loaded = 0.0

    def _server(self) -> redis.Redis | None:
        frontier = self.frontier
        return frontier.server if frontier is not None else None

    def marked_domains(self) -> set[str]:
        if time.monotonic() - self._loaded > self.refresh and (server := self._server()) is not None:
            try:
                self.marked = {text(d) for d in server.smembers(MARKED)}
                self._loaded = time.monotonic()
            except REDIS_ERRORS as exc:
                logger.warning("Redis unavailable (%s): using the browser domains known so far", exc)
        return self.marked

    def wants_browser(self, request: Request) -> bool:
        if request.meta.get(DOWNLOAD_RUNG) == "browser":  # the ladder's choice (crawlhub.downloadermiddlewares.ladder)
            return True
        choice = request.meta.get("browser")
        if choice is not None:
            return bool(choice)
        spider = self.crawler.spider
        return bool(getattr(spider, "use_browser", False)) or domain_of(request.url) in self.marked_domains()

    def elsewhere(self) -> Roles | None:
        """This worker has no browser but the crawl has (a browser worker takes the browser lane): the roles that
        move a page there; else None."""
        frontier = self.frontier
        if self.enabled or frontier is None or not frontier.roles.reachable(BROWSER):
            return None
        return frontier.roles

    def process_request(self, request: Request) -> Request | Response | None:
        if request.meta.get("playwright"):
            return None
        roles = self.elsewhere()
        if not (self.enabled or roles) or not self.wants_browser(request):
            return None
        if roles is not None:  # to the browser lane (a request off the shared frontier goes as it is)
            if not leased(request):
                return None
            self.crawler.stats.inc_value(f"roles/moved/{BROWSER}")
            return roles.moved(request, BROWSER, "the spider asks for the browser")
        request.meta["playwright"] = True
        referer = request.headers.get("Referer")
        if referer:  # Chromium sends its own headers: the Referer goes through page.goto
            goto = request.meta.setdefault("playwright_page_goto_kwargs", {})
            goto.setdefault("referer", referer.decode("latin-1"))
        return None

    def process_response(self, request: Request, response: Response) -> Request | Response:
        roles = self.elsewhere()
        if not self.enabled and (roles is None or not leased(request)):
            return response
        domain = domain_of(request.url)
        stats = self.crawler.stats
        if request.meta.get("playwright"):
            stats.inc_value(f"browser/pages/{domain}")
            return response
        stats.inc_value(f"browser/plain_pages/{domain}")
        needs = getattr(self.crawler.spider, "browser_needs", None)
        if not needs or request.meta.get("browser") is False or response.status != 200 or not isinstance(response, TextResponse):
            return response
        has_data = any(response.css(selector) for selector in needs)
        self._count(domain, "plain" if has_data else "fallback")
        if has_data:
            return response
        stats.inc_value(f"browser/fallback/{domain}")
        logger.info("%s has none of %s without JavaScript: rendering it in the browser", request.url, list(needs))
        if roles is not None:
            self.crawler.stats.inc_value(f"roles/moved/{BROWSER}")
            return roles.moved(request, BROWSER, f"none of {list(needs)} without JavaScript", browser=True)
        return request.replace(dont_filter=True, meta={**request.meta, "playwright": True, SAME_PAGE: True})

    def _count(self, domain: str, what: str) -> None:
        server = self._server()
        if server is None:
            return
        try:
            pipe = server.pipeline(transaction=False)
            pipe.hincrby(COUNTS + domain, what, 1)
            pipe.hgetall(COUNTS + domain)
            _, counts = pipe.execute()
            plain, fallback = int(counts.get(b"plain", 0)), int(counts.get(b"fallback", 0))
            if what == "fallback" and fallback >= self.min_fallbacks and fallback / (plain + fallback) >= self.ratio:
                if server.sadd(MARKED, domain):
                    logger.info("%s needs the browser for %d of %d pages: every worker renders it directly from now on",
                                domain, fallback, plain + fallback)
                self.marked.add(domain)
        except REDIS_ERRORS as exc:
            logger.warning("Redis unavailable (%s): browser fallback of %s not recorded", exc, domain)

    def process_exception(self, request: Request, exception: BaseException) -> Request | Response | None:
        reason = browser_failure(exception) if request.meta.get("playwright") else None
        if reason is None:
            return None
        if reason.startswith("browser did not start"):
            # (once per worker at error level: a broken Chromium fails every page it is given)
            told = self.crawler.stats.get_value("browser/launch_failures")
            self.crawler.stats.inc_value("browser/launch_failures")
            logger.log(logging.DEBUG if told else logging.ERROR,
                       "Chromium did not start (%s): %s goes back to the frontier as a retry, then the DLQ "
                       "(see BROWSER_LAUNCH_TIMEOUT, CHROMIUM_PATH)", reason, request.url)
        else:
            self.crawler.stats.inc_value("browser/timeouts")
        if leased(request):  # a retry through the shared frontier (or the DLQ)
            return intent.retry(request, reason)
        return None
