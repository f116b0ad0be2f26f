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
import time
from typing import Any
from urllib.parse import urldefrag, urlsplit

from scrapy.downloadermiddlewares.redirect import BaseRedirectMiddleware, MetaRefreshMiddleware, RedirectMiddleware
from scrapy.exceptions import IgnoreRequest
from scrapy.http import Request

from crawlhub import intent
from crawlhub.components import frontier_of
from crawlhub.intent import leased
from crawlhub.meta import AFTER_STORE, SEED_HOST, STATUS
from crawlhub.revisit.store import Redirected

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
            self._left_the_site(redirected, request, reason)
            if leased(request):
                return intent.drop(request, "redirect off the seed's host")
            raise IgnoreRequest(f"redirect to another host: {redirected.url}")
        try:
            return super()._redirect(redirected, request, reason)
        except IgnoreRequest:
            return self._give_up(request, reason, f"max redirections reached ({self.max_redirect_times}): "
                                 f"{' -> '.join([*chain, redirected.url])}")

    def _left_the_site(self, redirected: Request, request: Request, reason: Any) -> None:
        """A revisited page whose address now leads off the seed's host (the site moved to another domain): said at
        WARNING, for its stored items stop being refreshed, and noted in its status record (``redirected_to``, its
        schedule and validators kept, nothing marked gone: crawlhub.revisit.store.Redirected), written when its
        lease ends (crawlhub.downloadermiddlewares.revisit for a redirect on the host)."""
        known, spider = request.meta.get(STATUS) or {}, self.crawler.spider
        if spider is None or not (known.get("fp") and known.get("interval") and leased(request)):
            return
        self.crawler.stats.inc_value("revisit/redirected/offsite")
        logger.warning("%s, a page this crawl revisits, now redirects off the seed's host to %s: it is not followed "
                       "(same_host_only) and its stored items are no longer refreshed; nothing is marked gone. If the "
                       "site moved, seed its new host", request.url, redirected.url)
        origin = (request.meta.get("redirect_urls") or [request.url])[0]
        request.meta.setdefault(AFTER_STORE, []).append(Redirected(
            spider.name, known["fp"], origin, redirected.url, reason, time.time(), float(known["interval"]),
            permanent=False))

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
