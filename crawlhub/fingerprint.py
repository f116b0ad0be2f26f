"""REQUEST_FINGERPRINTER_CLASS: Scrapy's fingerprint of a request, its URL read without the parameters that only
track a visit (URL_TRACKING_PARAMS: ``utm_*``, ad click ids, session ids).

Sites put such parameters on some of their links (a newsletter's, a share button's, a servlet's ``;jsessionid=``);
to Scrapy's fingerprint ``/p?utm_source=mail`` and ``/p`` are two requests, so the page is fetched twice and, keyed
by its URL, stored twice. Read without them they are one: the frontier fetches the page once, as the link gave it
(the request's URL is not changed), and CleanPipeline stores its key URL without them.

Everything else is Scrapy's own fingerprint (``scrapy.utils.request.fingerprint``: the canonical URL, the method,
the body); a request whose URL has no such parameter has exactly Scrapy's fingerprint, so a crawl's filter, leases
and revisit store carry over. ``meta["verbatim_url"]`` (Scrapy's: the URL as it is) leaves the parameters in.
A project with a fingerprinter of its own sets REQUEST_FINGERPRINTER_CLASS; the addon's is the default.
"""

from __future__ import annotations

from typing import TYPE_CHECKING
from weakref import WeakKeyDictionary

from scrapy.utils.request import fingerprint

from crawlhub._utils.urls import IgnoredParams

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler
    from typing_extensions import Self


class RequestFingerprinter:
    def __init__(self, crawler: Crawler | None = None) -> None:
        from crawlhub import default_settings

        patterns = (crawler.settings.getlist("URL_TRACKING_PARAMS") if crawler is not None
                    else default_settings.URL_TRACKING_PARAMS)
        self.params = IgnoredParams(patterns)
        self._cache: WeakKeyDictionary[Request, bytes] = WeakKeyDictionary()

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        return cls(crawler)

    def fingerprint(self, request: Request) -> bytes:
        url = request.url
        stripped = self.params.strip_url(url)
        if stripped == url or request.meta.get("verbatim_url"):
            return fingerprint(request)  # Scrapy's, cached on the request
        found = self._cache.get(request)  # the copy's would not be: cached here
        if found is None:
            found = self._cache[request] = fingerprint(request.replace(url=stripped))
        return found
