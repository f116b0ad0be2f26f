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
  frontier, then the DLQ with the reason "browser timeout"; a Chromium that
  does not start (BROWSER_LAUNCH_TIMEOUT, its own budget) the same with
  "browser did not start".

docs/browser.md explains when the browser is used and its settings.
"""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path
from typing import Any

from scrapy.exceptions import NotConfigured
from scrapy.settings import BaseSettings

from crawlhub import meta
from crawlhub.frontier import keys
from crawlhub.roles import BROWSER_HANDLER

logger = logging.getLogger(__name__)

MARKED = keys.BROWSER_DOMAINS  # set: domains every worker renders in the browser
COUNTS = keys.BROWSER_COUNTS  # + domain: hash of plain (had the data), fallback (did not)
SAME_PAGE = meta.SAME_PAGE  # this request replaces its lease's (same page, other way)
HANDLER = BROWSER_HANDLER
# Chromium as root, offline: no sandbox (needs user namespaces), no GPU, no
# background connections to Google (refused here, and slow to fail).
CHROMIUM_ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-default-apps", "--disable-extensions", "--mute-audio",
]


def chromium_path(settings: BaseSettings) -> str:
    """CHROMIUM_PATH, else a Chromium on PATH (Debian's), else one that `playwright install chromium` put in its cache."""
    configured = settings.get("CHROMIUM_PATH")
    if configured:
        return str(configured)
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        found = shutil.which(name)
        if found:
            return found
    cache = Path(os.environ.get("PLAYWRIGHT_BROWSERS_PATH") or Path.home() / ".cache" / "ms-playwright")
    for chrome in sorted(cache.glob("chromium-*/chrome-linux*/chrome"), reverse=True):
        return str(chrome)
    raise NotConfigured(
        "no Chromium found: install Debian's chromium (`apt-get install chromium`, `make test` does it; where "
        "there is no such package, `playwright install chromium`) or set CHROMIUM_PATH"
    )


def browser_settings(settings: BaseSettings) -> dict[str, Any]:
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


def is_browser_timeout(exception: BaseException) -> bool:
    try:
        from playwright.async_api import TimeoutError as PlaywrightTimeout
    except ImportError:  # pragma: no cover - playwright is in requirements.txt
        return False
    return isinstance(exception, PlaywrightTimeout)


def browser_failure(exception: BaseException) -> str | None:
    """Why the browser could not fetch a page, as the DLQ says it (None: not the browser's failure).

    "browser did not start" when Chromium did not launch (BROWSER_LAUNCH_TIMEOUT, a missing or broken
    executable: the worker's fault, not the page's); "browser timeout" when the page did not load in
    BROWSER_TIMEOUT."""
    try:
        from playwright.async_api import Error as PlaywrightError
    except ImportError:  # pragma: no cover - playwright is in requirements.txt
        return None
    if not isinstance(exception, PlaywrightError):
        return None
    first = (str(exception).splitlines() or [""])[0]
    if first.startswith("BrowserType.launch"):
        return f"browser did not start: {first}"[:500]
    if is_browser_timeout(exception):
        return f"browser timeout: {first}"[:500]
    return None


