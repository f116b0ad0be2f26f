"""RevisitMiddleware: conditional GET on a revisit, and what each fetch tells the URL status store.

For spiders that declare a revisit policy (crawlhub.revisit.policy; a spider
that declares nothing is one-shot and this middleware does nothing):

* a revisit (queued by the refresher with the store's ``crawlhub_status``)
  asks ``If-None-Match`` / ``If-Modified-Since`` with the stored validators;
* every leased fetch that answers 2xx, 304, 404 or 410 becomes a
  :class:`~crawlhub.revisit.store.StatusUpdate` (validators, body signature,
  the adapted interval, the next fetch time), written with MongoPipeline's
  next flush;
* a 304 counts as unchanged, never reaches the callback, and its lease is
  acked; a 2xx whose body has the stored signature counts as unchanged too.

It sits at 540: responses reach it after retries (550) and redirects (580, 600).
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Awaitable
from typing import Any

from scrapy import Request, Spider, signals
from scrapy.crawler import Crawler
from scrapy.http import Response
from scrapy.utils.defer import maybe_deferred_to_future
from twisted.internet import threads

from crawlhub import intent, meta
from crawlhub._utils.urls import domain_of
from crawlhub.components import FrontierMiddleware
from crawlhub.connection import get_mongo, mongo_error
from crawlhub.intent import leased
from crawlhub.revisit.policy import RevisitPolicy
from crawlhub.revisit.store import GoneCheck, Redirected, StatusStore, StatusUpdate

logger = logging.getLogger(__name__)
RECORDED = frozenset({304, 404, 410})
class RevisitMiddleware(FrontierMiddleware):
    def __init__(self, crawler: Crawler) -> None:
        super().__init__(crawler)
        # a bad `revisit` on the spider class stops the worker here, before it crawls (never a crawl that
        # silently runs once); spider_opened reads it again from the spider (an argument may set it)
        self.policy = RevisitPolicy.for_spider(crawler.spidercls, crawler.settings)
        # the status store, read only when a revisit meets a redirect (opened then; closed with the spider)
        self.mongo: Any = None
        self.store: StatusStore | None = None
        crawler.signals.connect(self.spider_opened, signal=signals.spider_opened)
        crawler.signals.connect(self.spider_closed, signal=signals.spider_closed)

    def spider_opened(self, spider: Spider) -> None:
        self.policy = RevisitPolicy.for_spider(spider, self.crawler.settings)
        self.spider_name: str = spider.name

    def process_request(self, request: Request) -> Request | Response | None:
        known = request.meta.get(meta.STATUS)
        if known and self.policy.enabled:
            for header, field in ((b"If-None-Match", "etag"), (b"If-Modified-Since", "last_modified")):
                if not known.get(field):
                    continue
                if request.meta.get("redirect_urls"):
                    # the revisited page redirected: its validators are not the target's (a redirect keeps the
                    # request's headers), and a 304 there would say nothing of the page it came from
                    if request.headers.get(header) == known[field].encode("latin-1"):
                        del request.headers[header]
                else:
                    request.headers.setdefault(header, known[field])
        return None

    def process_response(self, request: Request, response: Response) -> Request | Response | Awaitable[Request | Response]:
        if self.frontier is None or not self.policy.enabled or not leased(request):
            return response
        if not (200 <= response.status < 300 or response.status in RECORDED):
            return response
        known = request.meta.get(meta.STATUS) or {}
        interval = known.get("interval") or self.policy.interval_for(request.url, request.meta)
        if interval is None:
            return response
        status = response.status
        signature = hashlib.sha1(response.body).hexdigest() if status != 304 else None
        changed: bool | None = None
        if known:
            changed = not (status == 304 or (signature is not None and signature == known.get("signature")))
        new_interval = self.policy.maximum if status in (404, 410) else self.policy.adapt(float(interval), changed)
        headers = response.headers
        fp = self.crawler.request_fingerprinter.fingerprint(request).hex()
        origin = (request.meta.get("redirect_urls") or [None])[0]
        if origin and known.get("fp") and known["fp"] != fp:  # the revisited page redirects to another page
            return self._redirected(request, response, known, origin, fp, signature)
        moved_from = None
        if known.get("fp") and known["fp"] != fp:  # a revisit of a record the fingerprinter now reads otherwise
            moved_from = {name: known.get(name) for name in ("fp", "fetches", "changes", "unchanged", "first_fetch")}
            self.crawler.stats.inc_value("revisit/records_moved")
            logger.info("The status record of %s moves to its fingerprint as the request fingerprinter reads it today "
                        "(%s, was %s: REQUEST_FINGERPRINTER_CLASS or URL_TRACKING_PARAMS changed)", request.url, fp,
                        known["fp"])
        update = StatusUpdate(
            spider=self.spider_name, fp=fp,
            url=request.url, domain=domain_of(request.url), request=meta.stored_request(request.meta[meta.LEASE_PAYLOAD]),
            fetched_at=time.time(), status=status,
            etag=_text(headers.get(b"ETag")), last_modified=_text(headers.get(b"Last-Modified")),
            signature=signature, interval=new_interval, changed=changed, moved_from=moved_from,
        )
        # once the page's items are stored (a 304: when its lease ends), as the page's judges leave it
        # (crawlhub.signals.page_done); the frontier's warden takes them with the answer
        after_store: list[object] = request.meta.setdefault(meta.AFTER_STORE, [])
        after_store.append(update)
        if known and (200 <= status < 300 or status in (404, 410)):  # a page fetched again: which items went
            after_store.append(GoneCheck(request.url, time.time(), everything=status in (404, 410),
                                         delay=self.policy.gone_delay))
        stats = self.crawler.stats
        if changed is not None:
            stats.inc_value("revisit/changed" if changed else "revisit/unchanged")
        if status == 304:
            stats.inc_value("revisit/not_modified")  # the callback never sees it; its lease ends, its status is written
            return intent.drop(request, "not modified since the last fetch (304)")
        return response

    async def _redirected(self, request: Request, response: Response, known: dict[str, Any], origin: str, fp: str,
                          signature: str | None) -> Request | Response:
        """A revisit whose page now redirects to another page (``origin`` -> ``request.url``). Its record keeps its
        address (:class:`~crawlhub.revisit.store.Redirected`). The redirect's kind and where it leads decide the rest:

        * a temporary one (302, 303, 307, a meta refresh: a maintenance page, a login, a lazy move): the store learns
          nothing of the page. Its record keeps its schedule and validators, nothing is marked gone; the answer is
          parsed as any redirect's is, unless the target has a record of its own (it is crawled under its own
          request: the home page, a listing, which the page's callback would misread);
        * a permanent one (301, 308) to a page with a record of its own: the page was removed and its address sent
          there. Its items are gone (unless the target is judged broken), and the answer is not parsed with the
          page's callback (it would read the target as the page: nothing, or the wrong thing);
        * a permanent one elsewhere: the page's new address (a new URL scheme, https). The answer is parsed, the new
          address gets a record (with the page's baseline), and the page's items not found there are gone, as a
          revisit's are (unless the page is judged broken there: crawlhub.extensions.quality).

        A page sent elsewhere for good is checked again less and less often (its interval grows as an unchanged
        page's does, up to ``revisit_max``): a site that takes the redirect back has its page back."""
        now = time.time()
        reasons = request.meta.get("redirect_reasons") or []
        status = reasons[0] if reasons else 302  # (Scrapy's: a status, or "meta refresh")
        permanent = status in (301, 308)
        interval = float(known.get("interval") or self.policy.minimum)
        if permanent:
            interval = self.policy.adapt(interval, changed=False)
        after_store: list[object] = request.meta.setdefault(meta.AFTER_STORE, [])
        after_store.append(Redirected(self.spider_name, known["fp"], origin, request.url, status, now, interval,
                                      permanent=permanent))
        stats = self.crawler.stats
        store = self._status_store()  # (opened here, in the reactor's thread; read in another)
        target = await maybe_deferred_to_future(threads.deferToThread(self._record_state, store, fp))
        ours = "a page this crawl fetches under its own request" if target is not None else "new to this crawl"
        if not permanent:
            stats.inc_value("revisit/redirected/temporary")
            logger.info("%s redirects for now (%s) to %s, %s: nothing is marked gone and the page keeps its schedule "
                        "(checked again in %gs)%s", origin, status, request.url, ours, interval,
                        "; the answer is not parsed with its callback" if target is not None else "")
            if target is not None:
                return intent.drop(request, f"the revisited page {origin} redirects for now to {request.url}, "
                                            "crawled on its own")
            return response
        again = f"its own address is checked again in {interval:g}s"
        if target is not None:
            # (a target judged broken, a new address whose markup the spider does not read: its items are not
            # known to be gone, and the page is not marked)
            skip = f"the page it redirects to, {request.url}, is judged broken: {target}" if target else ""
            after_store.append(GoneCheck(origin, now, everything=True, skip=skip, delay=self.policy.gone_delay))
            stats.inc_value("revisit/redirected/removed")
            logger.info("%s now redirects to %s, %s: the page is taken as removed (%s) and the answer is not parsed "
                        "with its callback; %s", origin, request.url, ours,
                        f"its items are not marked gone: {skip}" if skip else "its items are marked gone", again)
            return intent.drop(request, f"the revisited page {origin} redirects to {request.url}, crawled on its own")
        stats.inc_value("revisit/redirected/moved")
        logger.info("%s now redirects to %s, %s: taken as the page's new address (a record of its own starts there; "
                    "the page's items not found there are marked gone); %s", origin, request.url, ours, again)
        if response.status == 304:  # (the spider's own conditional headers): nothing to parse, nothing to judge
            return intent.drop(request, "not modified since the last fetch (304), at the address it redirects to")
        first = self.policy.interval_for(request.url, request.meta) or float(known.get("interval") or 0)
        if response.status in (404, 410):
            first = self.policy.maximum
        after_store.append(StatusUpdate(
            spider=self.spider_name, fp=fp, url=request.url, domain=domain_of(request.url),
            request=meta.stored_request(request.meta[meta.LEASE_PAYLOAD]), fetched_at=now, status=response.status,
            etag=_text(response.headers.get(b"ETag")), last_modified=_text(response.headers.get(b"Last-Modified")),
            signature=signature, interval=self.policy.bound(first), changed=None, keep_request=True,
            items=known.get("items")))  # the page's baseline, until its judges say (crawlhub.extensions.quality)
        after_store.append(GoneCheck(origin, now, everything=response.status in (404, 410), delay=self.policy.gone_delay))
        return response

    def _status_store(self) -> StatusStore:
        if self.store is None:
            settings = self.crawler.settings
            self.mongo = get_mongo(settings)
            self.store = StatusStore.of(self.mongo, settings)
        return self.store

    def _record_state(self, store: StatusStore, fp: str) -> str | None:
        """(In a thread.) The target's record: None if it has none (StatusStore.record_state); None also when the
        store cannot say (MongoDB down: the redirect is then taken as the page's new address, which marks nothing
        gone that its target still shows)."""
        from pymongo.errors import PyMongoError

        try:
            return store.record_state(self.spider_name, fp)
        except PyMongoError as exc:
            logger.warning("Could not read the status store (%s): a redirect is taken as its page's new address",
                           mongo_error(exc))
            return None

    def spider_closed(self, spider: Spider) -> None:
        if self.mongo is not None:
            self.mongo.close()


def _text(value: bytes | None) -> str | None:
    return value.decode("latin-1") if value else None
