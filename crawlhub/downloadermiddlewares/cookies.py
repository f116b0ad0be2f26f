"""OfflineCookiesMiddleware (700, in place of Scrapy's CookiesMiddleware): Scrapy's cookies, no internet needed.

Scrapy's middleware asks tldextract whether a cookie's domain is a public suffix (a cookie set for ``co.uk`` is
refused, as a browser refuses it). The extractor Scrapy builds fetches the Public Suffix List from
publicsuffix.org the first time it is asked: a worker with no route to the internet (many production nodes)
logs a traceback per URL of the list, and one behind a firewall that drops packets waits on them. A worker needs
no internet for its own work, so this one reads the snapshot of the list that tldextract ships
(``suffix_list_urls=()``), kept in memory only (``cache_dir=None``: nothing written under the user's home).
Everything else is Scrapy's middleware, unchanged.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from http.cookiejar import Cookie

from scrapy import Request
from scrapy.downloadermiddlewares.cookies import CookiesMiddleware
from scrapy.http.cookies import CookieJar
from scrapy.utils.httpobj import urlparse_cached
from tldextract import TLDExtract


@functools.lru_cache(maxsize=1)
def suffix_list() -> TLDExtract:
    """tldextract on its bundled snapshot of the Public Suffix List (read once per process, when first asked)."""
    return TLDExtract(suffix_list_urls=(), cache_dir=None, include_psl_private_domains=True)


def is_public_domain(domain: str) -> bool:
    """Whether ``domain`` is a public suffix (``co.uk``, ``github.io``): no site's own."""
    return not suffix_list()(domain).domain


class OfflineCookiesMiddleware(CookiesMiddleware):
    """Scrapy's CookiesMiddleware with the public-suffix check on the bundled list (see the module)."""

    def _process_cookies(self, cookies: Iterable[Cookie], *, jar: CookieJar, request: Request) -> None:
        # Scrapy's own (2.14 to 2.19), with is_public_domain in place of its module's _is_public_domain
        for cookie in cookies:
            cookie_domain = cookie.domain.removeprefix(".")
            hostname = urlparse_cached(request).hostname
            if hostname is None:
                continue
            request_domain = hostname.lower()
            if cookie_domain and is_public_domain(cookie_domain):
                if cookie_domain != request_domain:
                    continue
                cookie.domain = request_domain
            jar.set_cookie_if_ok(cookie, request)
