"""Headless Chromium where it is needed (scrapy-playwright), and only there.

- ``BrowserDownloadHandler`` (crawlhub.browser_handler, imported only when used): scrapy-playwright's download handler on Debian's
  Chromium (``CHROMIUM_PATH``, else found on PATH), launched with flags that
  work offline and as root. Requests without ``meta["playwright"]`` still go
  through Scrapy's plain HTTP handler. Installed only for spiders that use
  the browser (``use_browser``, ``browser_needs`` or ``BROWSER_ENABLED``), so
  plain workers never start Playwright.
- ``BrowserMiddleware`` decides per request: the spider's ``use_browser``,
  ``meta={"browser": True}`` (or False), or a domain remembered in Redis as
  needing the browser. With ``browser_needs`` (CSS selectors the data needs),
  a plain page that matches none of them is fetched again through the browser
  once; when most of a domain's pages need that (``BROWSER_MARK_RATIO``), the
  domain goes into ``crawlhub:browser_domains`` and every worker renders it
  directly. A page or navigation timeout is an ordinary retry through the
  frontier, then the DLQ with the reason "browser timeout".

docs/browser.md explains when the browser is used and its settings.
"""

from __future__ import annotations

import logging
import os
import shutil
import time
from pathlib import Path

import redis
from scrapy.exceptions import IgnoreRequest, NotConfigured
from scrapy.http import TextResponse

from crawlhub.frontier.leases import domain_of
from crawlhub.middlewares import FrontierMiddleware

logger = logging.getLogger(__name__)

MARKED = "crawlhub:browser_domains"  # set: domains every worker renders in the browser
COUNTS = "crawlhub:browser:"  # hash per domain: plain (had the data), fallback (did not)
SAME_PAGE = "crawlhub_same_page"  # meta: this request replaces its lease's (same page, other way)
HANDLER = "crawlhub.browser_handler.BrowserDownloadHandler"
# Chromium as root, offline: no sandbox (needs user namespaces), no GPU, no
# background connections to Google (refused here, and slow to fail).
CHROMIUM_ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-default-apps", "--disable-extensions", "--mute-audio",
]


def chromium_path(settings) -> str:
    """CHROMIUM_PATH, else a Chromium on PATH (Debian's), else one that `playwright install chromium` put in its cache."""
    configured = settings.get("CHROMIUM_PATH")
    if configured:
        return configured
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        found = shutil.which(name)
        if found:
            return found
    cache = Path(os.environ.get("PLAYWRIGHT_BROWSERS_PATH") or Path.home() / ".cache" / "ms-playwright")
    for found in sorted(cache.glob("chromium-*/chrome-linux*/chrome"), reverse=True):
        return str(found)
    raise NotConfigured(
        "no Chromium found: install Debian's chromium (`apt-get install chromium`, `make test` does it; where "
        "there is no such package, `playwright install chromium`) or set CHROMIUM_PATH"
    )


def browser_settings(settings) -> dict:
    """What a browser-using spider adds to its settings (DOWNLOAD_HANDLERS and scrapy-playwright's limits)."""
    contexts = settings.getint("BROWSER_MAX_CONTEXTS")
    if contexts:
        # a context per proxy (its address and credentials are the context's):
        # room for each, or a page would wait for a context that never frees
        from crawlhub.proxies import ProxyConfigError, parse_pools

        try:
            pools = parse_pools(settings.getdict("PROXY_POOLS"), settings.get("PROXY_FILE") or None)
            proxies = sum(len(ps) for ps in pools.values())
        except ProxyConfigError:
            proxies = 0  # the proxy middleware reports it
        contexts = max(contexts, proxies + 1 if proxies else 0)
    return {
        "DOWNLOAD_HANDLERS": {"http": HANDLER, "https": HANDLER},
        "PLAYWRIGHT_BROWSER_TYPE": "chromium",
        # Chromium's own request headers, as it sends them (names' case included):
        # Scrapy's USER_AGENT / DEFAULT_REQUEST_HEADERS would make it look like something else
        "PLAYWRIGHT_PROCESS_REQUEST_HEADERS": None,
        "PLAYWRIGHT_MAX_CONTEXTS": contexts or None,
        "PLAYWRIGHT_MAX_PAGES_PER_CONTEXT": settings.getint("BROWSER_MAX_PAGES_PER_CONTEXT"),
        "PLAYWRIGHT_DEFAULT_NAVIGATION_TIMEOUT": settings.getfloat("BROWSER_TIMEOUT") * 1000,
    }


def browser_user_agent(version: str) -> str:
    """What Chromium on Linux says when it is not headless (Headless is a giveaway)."""
    return (f"Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) "
            f"Chrome/{version.split('.')[0]}.0.0.0 Safari/537.36")


def is_browser_timeout(exception) -> bool:
    try:
        from playwright.async_api import TimeoutError as PlaywrightTimeout
    except ImportError:  # pragma: no cover - playwright is in requirements.txt
        return False
    return isinstance(exception, PlaywrightTimeout)


class BrowserMiddleware(FrontierMiddleware):
    """Which requests the browser renders; the fallback; timeouts as retries (order 370, before the proxy and header profile)."""

    needs = "retry"

    def __init__(self, crawler):
        super().__init__(crawler)
        settings = crawler.settings
        self.enabled = any(v == HANDLER for v in settings.getdict("DOWNLOAD_HANDLERS").values())
        self.ratio = settings.getfloat("BROWSER_MARK_RATIO")
        self.min_fallbacks = settings.getint("BROWSER_MARK_MIN_FALLBACKS")
        self.refresh = settings.getfloat("BROWSER_DOMAINS_REFRESH")
        self.marked: set[str] = set()
        self._loaded = 0.0

    def _server(self):
        scheduler = self.scheduler
        return scheduler.server if scheduler is not None else None

    def marked_domains(self) -> set[str]:
        if time.monotonic() - self._loaded > self.refresh and (server := self._server()) is not None:
            try:
                self.marked = {d.decode() for d in server.smembers(MARKED)}
                self._loaded = time.monotonic()
            except redis.RedisError as exc:
                logger.warning("Redis unavailable (%s): using the browser domains known so far", exc)
        return self.marked

    def wants_browser(self, request) -> bool:
        choice = request.meta.get("browser")
        if choice is not None:
            return bool(choice)
        spider = self.crawler.spider
        return bool(getattr(spider, "use_browser", False)) or domain_of(request.url) in self.marked_domains()

    def process_request(self, request):
        if not self.enabled or request.meta.get("playwright") or not self.wants_browser(request):
            return None
        request.meta["playwright"] = True
        referer = request.headers.get("Referer")
        if referer:  # Chromium sends its own headers: the Referer goes through page.goto
            goto = request.meta.setdefault("playwright_page_goto_kwargs", {})
            goto.setdefault("referer", referer.decode("latin-1"))
        return None

    def process_response(self, request, response):
        if not self.enabled:
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
        return request.replace(dont_filter=True, meta={**request.meta, "playwright": True, SAME_PAGE: True})

    def _count(self, domain: str, what: str) -> None:
        server = self._server()
        if server is None:
            return
        try:
            pipe = server.pipeline(transaction=False)
            pipe.hincrby(COUNTS + domain, what, 1).hgetall(COUNTS + domain)
            _, counts = pipe.execute()
            plain, fallback = int(counts.get(b"plain", 0)), int(counts.get(b"fallback", 0))
            if what == "fallback" and fallback >= self.min_fallbacks and fallback / (plain + fallback) >= self.ratio:
                if server.sadd(MARKED, domain):
                    logger.info("%s needs the browser for %d of %d pages: every worker renders it directly from now on",
                                domain, fallback, plain + fallback)
                self.marked.add(domain)
        except redis.RedisError as exc:
            logger.warning("Redis unavailable (%s): browser fallback of %s not recorded", exc, domain)

    def process_exception(self, request, exception):
        if not request.meta.get("playwright") or not is_browser_timeout(exception):
            return None
        scheduler = self.scheduler
        reason = f"browser timeout: {str(exception).splitlines()[0]}"[:500]
        self.crawler.stats.inc_value("browser/timeouts")
        if scheduler is not None and scheduler.retry(request, reason):
            raise IgnoreRequest(f"{reason}: retry or DLQ through the frontier")
        return None

