"""LeaseWarden: the one owner of a lease's end, whichever way its request leaves Scrapy.

A leased request leaves Scrapy in one of these ways, and each ends its lease:

* its response reaches the spider and the callback's output is consumed
  (``LeaseSpiderMiddleware``): acked once its items are stored;
* the callback or errback raises, before or while yielding, or a spider
  middleware's hook raises: Scrapy's ``spider_error`` signal (here): the
  lease ends in the dead-letter list, "callback error: ...";
* the download fails, is retried, dead-lettered or dropped in a downloader
  middleware's ``process_request``/``process_exception`` (retry, robots, the
  lease middleware): those end it as they decide;
* a redirect or the same page fetched another way replaces it (the new
  request is queued, then the lease ends: ``LeaseBook.ended_by``);
* the scheduler refuses it: ``request_dropped`` (here);
* anything else, above all an exception raised in a downloader middleware's
  ``process_response`` (a corrupt gzip body, a decompression bomb, a user
  middleware's IgnoreRequest), reaches no hook of crawlhub's: the **sweep**
  (here, every FRONTIER_POLL_INTERVAL and at close) finds every lease whose
  request Scrapy's engine no longer holds (``crawlhub._compat.in_progress``)
  although no end was recorded, and ends it: the dead-letter list with the
  failure Scrapy reported for it (``crawlhub.logformatter.LogFormatter``
  notes it in the request's meta), or "left Scrapy without reaching the
  spider" with the answer's status when none was reported.

So no lease outlives its request, and none is renewed for ever by a live
worker. The warden decides nothing else: the frontier client carries out
the end (ack, retry, dead letter), as for every other path.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from scrapy import Request, signals
from scrapy.crawler import Crawler

from crawlhub import meta
from crawlhub._compat import in_progress

if TYPE_CHECKING:
    from crawlhub.frontier.client import FrontierClient
    from crawlhub.frontier.leasebook import Lease

logger = logging.getLogger(__name__)


class LeaseWarden:
    def __init__(self, crawler: Crawler, frontier: FrontierClient, waiting: Callable[[], Iterable[Request]]):
        self.crawler = crawler
        self.frontier = frontier
        self.waiting = waiting  # requests leased but not yet handed to the engine (the scheduler's)
        crawler.signals.connect(self.spider_error, signal=signals.spider_error)
        crawler.signals.connect(self.request_dropped, signal=signals.request_dropped)
        crawler.signals.connect(self.response_received, signal=signals.response_received)

    # -- Scrapy's signals ------------------------------------------------------------------------------
    def spider_error(self, failure: Any, response: Any, spider: Any = None) -> None:
        """A callback, an errback or a spider middleware raised: the page's lease ends in the DLQ.
        (For an errback, ``response`` is the download's Failure, which carries the request.)"""
        request = getattr(response, "request", None)
        self.frontier.output_finished(request, failure.value)

    def request_dropped(self, request: Request, spider: Any = None) -> None:
        self.frontier.dropped(request, "refused by the scheduler")

    def response_received(self, response: Any, request: Request, spider: Any = None) -> None:
        lease = self.frontier.lease_of(request)
        if lease is not None:
            lease.status = response.status

    # -- the last resort ------------------------------------------------------------------------------
    def sweep(self) -> int:
        """End every lease whose request Scrapy no longer holds though no end was recorded; how many."""
        held = in_progress(self.crawler)
        if held is None:  # the engine is not running (closing, or not started): nothing can be told
            return 0
        live = {id(r) for r in held} | {id(r) for r in self.waiting()}
        leaked = [lease for lease in self.frontier.leases
                  if not lease.output_done and lease.request is not None and id(lease.request) not in live]
        for lease in leaked:
            self._end_leaked(lease)
        return len(leaked)

    def _end_leaked(self, lease: Lease) -> None:
        request = lease.request
        assert request is not None
        failure = request.meta.get(meta.FAILURE)
        status = f" after a {lease.status} answer" if lease.status is not None else ""
        if failure:
            reason = f"{failure} (raised on the way back from the download{status})"
        else:
            reason = (f"left Scrapy without reaching the spider{status}: dropped in a downloader middleware's "
                      "process_response (IgnoreRequest), or handled by an errback")
        self.frontier.stats.inc_value("leases/leaked")
        logger.warning("%s left Scrapy with its lease open: %s; ending it in the dead-letter list", lease.url, reason)
        self.frontier.dead_letter(request, error=reason, status=lease.status)
