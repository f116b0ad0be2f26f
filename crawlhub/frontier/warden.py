"""LeaseWarden: the one owner of a lease's end, whichever way its request leaves Scrapy.

A leased request leaves Scrapy in one of these ways, and each ends its lease:

* its response reaches the spider and the callback's output is consumed
  (``LeaseSpiderMiddleware``): acked once its items are stored;
* the callback or errback raises, before or while yielding, or a spider
  middleware's hook raises: Scrapy's ``spider_error`` signal (here): the
  lease ends in the dead-letter list, "callback error: ...";
* a downloader middleware decides its end (crawlhub.intent: retry, postpone,
  dead letter, drop): a request carrying the decision comes back through
  Scrapy's engine to the scheduler, which carries it out;
* the download fails, or is dropped with IgnoreRequest in a
  ``process_request``: the lease middleware (crawlhub.frontier.hooks) hears it
  in ``process_exception`` and tells the warden;
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
worker. A download that never ends (a download handler waiting for ever:
crawlhub.impersonate's watchdog ends curl_cffi's) keeps its request in the
engine and its lease renewed: the sweep says so, once a lease, when it has
been in the engine for ``long_download`` seconds (3 times the longer of
DOWNLOAD_TIMEOUT and BROWSER_TIMEOUT), and counts ``leases/long_downloads``.
The warden also keeps each lease's accounting in the lease book: the
download's end (crawlhub.signals.download_finished), the items a page yields
and their fate (the lease spider middleware, Scrapy's item signals). It
decides nothing else: the frontier client carries out the end (ack, retry,
dead letter), as for every other path.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from scrapy import Request, signals
from scrapy.crawler import Crawler

from crawlhub import meta
from crawlhub import signals as crawlhub_signals
from crawlhub._compat import in_progress
from crawlhub._utils.urls import domain_of
from crawlhub.connection import REDIS_ERRORS
from crawlhub.exceptions import InvalidItem
from crawlhub.frontier.records import Finish, lease_domain
from crawlhub.intent import drop

if TYPE_CHECKING:
    from crawlhub.frontier.client import FrontierClient
    from crawlhub.frontier.leasebook import Lease

logger = logging.getLogger(__name__)


class LeaseWarden:
    def __init__(self, crawler: Crawler, frontier: FrontierClient, waiting: Callable[[], Iterable[Request]]):
        self.crawler = crawler
        self.frontier = frontier
        self.waiting = waiting  # requests leased but not yet handed to the engine (the scheduler's)
        s = crawler.settings
        self.long_download = 3 * max(s.getfloat("DOWNLOAD_TIMEOUT", 180.0), s.getfloat("BROWSER_TIMEOUT", 30.0))
        crawler.signals.connect(self.spider_error, signal=signals.spider_error)
        crawler.signals.connect(self.request_dropped, signal=signals.request_dropped)
        crawler.signals.connect(self.response_received, signal=signals.response_received)
        crawler.signals.connect(self.download_finished, signal=crawlhub_signals.download_finished)
        for signal in (signals.item_scraped, signals.item_dropped, signals.item_error):
            crawler.signals.connect(self.item_finished, signal=signal)

    # -- Scrapy's signals ------------------------------------------------------------------------------
    def spider_error(self, failure: Any, response: Any, spider: Any = None) -> None:
        """A callback, an errback or a spider middleware raised: the page's lease ends in the DLQ.
        (For an errback, ``response`` is the download's Failure, which carries the request.)"""
        self.output_finished(getattr(response, "request", None), failure.value)

    def request_dropped(self, request: Request, spider: Any = None) -> None:
        if self.frontier.lease_of(request) is not None:
            self.frontier.ends.end(drop(request, "refused by the scheduler"))

    def response_received(self, response: Any, request: Request, spider: Any = None) -> None:
        lease = self.frontier.lease_of(request)
        if lease is not None:
            lease.status = response.status
            # a revisit's news for the URL status store, written once the page's items are stored
            lease.after_store = request.meta.pop(meta.AFTER_STORE, None) or lease.after_store

    def download_finished(self, request: Request, status: int | None, retry_after: float = 0.0) -> None:
        """A download is over: its domain's concurrency slot frees with the next round trip; a slow-down
        (429/503) is sent at once, so that every worker slows down now."""
        lease_id = request.meta.get(meta.LEASE) or ""
        outcome = self.frontier.politeness.outcome(status)
        done = Finish(lease_domain(lease_id) or domain_of(request.url), lease_id, outcome, retry_after)
        if outcome != "slow":
            self.frontier.leases.download_finished(lease_id, done if lease_id or outcome else None)
            return
        self.frontier.leases.download_finished(lease_id)
        try:
            factor = self.frontier.ops.finish(done)
        except REDIS_ERRORS as exc:
            logger.warning("Redis unavailable (%s): the slow-down of %s is held until it is back", exc, done.domain)
            self.frontier.leases.finished.append(done)
            return
        self.frontier.stats.inc_value(f"politeness/slowdown/{done.domain}")
        logger.info("%s answered %s: every worker slows down on %s (factor %g%s)", request.url, status, done.domain,
                    factor, f", none before {retry_after:g}s" if retry_after else "")

    # -- a page's output (the lease spider middleware, Scrapy's item signals) ----------------------------
    def item_emitted(self, request: Request | None) -> None:
        self.frontier.leases.item_emitted(request)

    def item_finished(self, item: Any, response: Any = None, exception: BaseException | None = None,
                      **kwargs: Any) -> None:
        if response is not None:
            self._done(self.frontier.leases.item_finished(response.request, invalid=isinstance(exception, InvalidItem)))

    def output_finished(self, request: Request | None, error: BaseException | None = None) -> None:
        self._done(self.frontier.leases.output_finished(request, error))

    def _done(self, lease: Lease | None) -> None:
        if lease is None:
            return
        if lease.error is None and lease.request is not None:
            # the page's judges (crawlhub.extensions.quality) may amend what the store does after it
            self.crawler.signals.send_catch_log(crawlhub_signals.page_done, request=lease.request, status=lease.status,
                                                items=lease.items, invalid=lease.invalid, after_store=lease.after_store)
        if self.frontier.leases.wait_for_store:
            self.frontier.ends.after_store_flush(lease)
        else:
            self.frontier.ends.finish([lease.id])

    # -- the last resort ------------------------------------------------------------------------------
    def sweep(self) -> int:
        """End every lease whose request Scrapy no longer holds though no end was recorded; how many."""
        held = in_progress(self.crawler)
        if held is None:  # the engine is not running (closing, or not started): nothing can be told
            return 0
        engine = {id(r) for r in held}
        live = engine | {id(r) for r in self.waiting()}
        leaked = [lease for lease in self.frontier.leases
                  if not lease.output_done and lease.request is not None and id(lease.request) not in live]
        for lease in leaked:
            self._end_leaked(lease)
        self._say_long(lease for lease in self.frontier.leases if lease.downloading and id(lease.request) in engine)
        return len(leaked)

    def _say_long(self, downloading: Iterable[Lease]) -> None:
        """Say (once a lease) a download in the engine for longer than any timeout allows: it may never end."""
        now = time.monotonic()
        for lease in downloading:
            if not lease.in_engine_since:
                lease.in_engine_since = now
            elif not lease.said_long and now - lease.in_engine_since > self.long_download:
                lease.said_long = True
                self.frontier.stats.inc_value("leases/long_downloads")
                logger.warning("%s has been downloading for more than %.0f s (3 times the longest timeout): its download "
                               "handler may never end it; its lease %s is renewed while this worker runs. Stopping the "
                               "worker gives it back to the queue", lease.url, self.long_download, lease.id)

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
