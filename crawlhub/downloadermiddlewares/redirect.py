"""Redirects that always end their lease: Scrapy's redirect middlewares, plus

* **too many hops** (REDIRECT_MAX_TIMES) and **loops** (a redirect back to a URL
  of its own chain): the request goes to ``<spider>:dlq`` with the chain, and
  the log says so at ERROR. Scrapy raises IgnoreRequest inside
  ``process_response``, which no ``process_exception`` sees: the lease would
  be held (and renewed) forever, and the crawl would never drain;
* **the seed's host**: a spider with ``same_host_only`` follows only links on
  its seed's host, and a redirect obeys the same rule: a followed link that
  redirects to another host is dropped (counted as ``redirect/offsite`` and
  logged). A seed itself may move (``example.com`` -> ``www.example.com``):
  its new host becomes the host the crawl follows.

Same places as Scrapy's (580 and 600); Scrapy's are disabled in the settings.
"""

from __future__ import annotations

import logging
from urllib.parse import urldefrag, urlsplit

from scrapy.downloadermiddlewares.redirect import MetaRefreshMiddleware, RedirectMiddleware
from scrapy.exceptions import IgnoreRequest

from crawlhub.components import frontier_of
from crawlhub.spider import SEED_HOST

logger = logging.getLogger(__name__)


class FrontierRedirectMixin:
    def _redirect(self, redirected, request, reason):
        chain = [*request.meta.get("redirect_urls", []), request.url]
        frontier = frontier_of(self.crawler)
        if urldefrag(redirected.url)[0] in {urldefrag(u)[0] for u in chain}:
            self._give_up(frontier, request, reason, f"redirect loop: {' -> '.join([*chain, redirected.url])}")
        if not self._on_seed_host(redirected, request):
            self.crawler.stats.inc_value("redirect/offsite")
            logger.info("Dropped the redirect of %s to %s: not on the seed's host %s (same_host_only)",
                        request.url, redirected.url, request.meta.get(SEED_HOST))
            if frontier is not None:
                frontier.dropped(request, "redirect off the seed's host")
            raise IgnoreRequest(f"redirect to another host: {redirected.url}")
        try:
            return super()._redirect(redirected, request, reason)
        except IgnoreRequest:
            self._give_up(frontier, request, reason,
                          f"max redirections reached ({self.max_redirect_times}): {' -> '.join([*chain, redirected.url])}")

    def _on_seed_host(self, redirected, request) -> bool:
        seed_host = request.meta.get(SEED_HOST)
        host = urlsplit(redirected.url).hostname
        if not seed_host or host == seed_host or not getattr(self.crawler.spider, "same_host_only", False):
            return True
        if request.meta.get("depth", 0) == 0:  # the seed itself moved: follow its new host
            redirected.meta[SEED_HOST] = host
            return True
        return False

    def _give_up(self, frontier, request, reason, error: str):
        self.crawler.stats.inc_value("redirect/gave_up")
        if frontier is not None and frontier.lease_of(request) is not None:
            status = reason if isinstance(reason, int) else None
            frontier.dead_letter(request, error=error[:1000], status=status)
        else:
            logger.error("Gave up on %s: %s", request.url, error[:1000])
        raise IgnoreRequest(error[:200])


class FrontierRedirectMiddleware(FrontierRedirectMixin, RedirectMiddleware):
    """Scrapy's RedirectMiddleware whose every outcome ends the lease."""


class FrontierMetaRefreshMiddleware(FrontierRedirectMixin, MetaRefreshMiddleware):
    """Scrapy's MetaRefreshMiddleware whose every outcome ends the lease."""
