"""Redirects that always end their lease: Scrapy's redirect middlewares, plus

* **too many hops** (REDIRECT_MAX_TIMES) and **loops** (a redirect back to a URL
  of its own chain): the request goes to ``<spider>:dlq`` with the chain, and
  the log says so at ERROR (crawlhub.intent.dead_letter: Scrapy raises
  IgnoreRequest inside ``process_response``, which no ``process_exception``
  sees: the lease would be held, and renewed, until the warden's sweep);
* **the seed's host**: a spider with ``same_host_only`` follows only links on
  its seed's host, and a redirect obeys the same rule: a followed link that
  redirects to another host is dropped (counted as ``redirect/offsite`` and
  logged). A seed itself may move (``example.com`` -> ``www.example.com``):
  its new host becomes the host the crawl follows.

Same places as Scrapy's (580 and 600); Scrapy's are disabled in the settings.
"""

from __future__ import annotations

import logging
from typing import Any
from urllib.parse import urldefrag, urlsplit

from scrapy.downloadermiddlewares.redirect import BaseRedirectMiddleware, MetaRefreshMiddleware, RedirectMiddleware
from scrapy.exceptions import IgnoreRequest
from scrapy.http import Request

from crawlhub import intent
from crawlhub.components import frontier_of
from crawlhub.intent import leased
from crawlhub.meta import SEED_HOST

logger = logging.getLogger(__name__)


class FrontierRedirectMixin(BaseRedirectMiddleware):
    def _redirect(self, redirected: Request, request: Request, reason: Any) -> Request:
        chain = [*request.meta.get("redirect_urls", []), request.url]
        if urldefrag(redirected.url)[0] in {urldefrag(u)[0] for u in chain}:
            return self._give_up(request, reason, f"redirect loop: {' -> '.join([*chain, redirected.url])}")
        if not self._on_seed_host(redirected, request):
            self.crawler.stats.inc_value("redirect/offsite")
            logger.info("Dropped the redirect of %s to %s: not on the seed's host %s (same_host_only)",
                        request.url, redirected.url, request.meta.get(SEED_HOST))
            if leased(request):
                return intent.drop(request, "redirect off the seed's host")
            raise IgnoreRequest(f"redirect to another host: {redirected.url}")
        try:
            return super()._redirect(redirected, request, reason)
        except IgnoreRequest:
            return self._give_up(request, reason, f"max redirections reached ({self.max_redirect_times}): "
                                 f"{' -> '.join([*chain, redirected.url])}")

    def _on_seed_host(self, redirected: Request, request: Request) -> bool:
        seed_host = request.meta.get(SEED_HOST)
        host = urlsplit(redirected.url).hostname
        if not seed_host or host == seed_host or not getattr(self.crawler.spider, "same_host_only", False):
            return True
        if request.meta.get("depth", 0) == 0:  # the seed itself moved: follow its new host
            redirected.meta[SEED_HOST] = host
            return True
        return False

    def _give_up(self, request: Request, reason: Any, error: str) -> Request:
        """The dead-letter list for a leased request (the scheduler carries it out); else IgnoreRequest."""
        self.crawler.stats.inc_value("redirect/gave_up")
        if frontier_of(self.crawler) is not None and leased(request):
            return intent.dead_letter(request, error, status=reason if isinstance(reason, int) else None)
        logger.error("Gave up on %s: %s", request.url, error[:1000])
        raise IgnoreRequest(error[:200])


class FrontierRedirectMiddleware(FrontierRedirectMixin, RedirectMiddleware):
    """Scrapy's RedirectMiddleware whose every outcome ends the lease."""


class FrontierMetaRefreshMiddleware(FrontierRedirectMixin, MetaRefreshMiddleware):
    """Scrapy's MetaRefreshMiddleware whose every outcome ends the lease."""
