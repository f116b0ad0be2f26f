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
import json
import logging
import time

from scrapy import Request, Spider, signals
from scrapy.crawler import Crawler
from scrapy.http import Response

from crawlhub import intent, meta
from crawlhub._utils.urls import domain_of
from crawlhub.components import FrontierMiddleware
from crawlhub.intent import leased
from crawlhub.revisit.policy import RevisitPolicy
from crawlhub.revisit.store import GoneCheck, StatusUpdate

logger = logging.getLogger(__name__)
RECORDED = frozenset({304, 404, 410})
# meta of one fetch, not of the page: left out of the request the store keeps
NOT_STORED = (*meta.PARENT_ONLY, meta.ROBOTS_WAITS, meta.RESLOT, meta.SLOT_TAKEN, meta.SAME_PAGE, "redirect_urls",
              "redirect_times", "redirect_ttl", "redirect_reasons", "download_slot", "download_latency")


def stored_request(payload: bytes) -> str:
    """A leased request's JSON as the status store keeps it: no per-fetch meta, and a revisit is never filtered."""
    data = json.loads(payload)
    request_meta = data.get("meta") or {}
    for key in NOT_STORED:
        request_meta.pop(key, None)
    if request_meta:
        data["meta"] = request_meta
    else:
        data.pop("meta", None)
    data["dont_filter"] = True
    return json.dumps(data, separators=(",", ":"), ensure_ascii=False)


class RevisitMiddleware(FrontierMiddleware):
    def __init__(self, crawler: Crawler) -> None:
        super().__init__(crawler)
        # a bad `revisit` on the spider class stops the worker here, before it crawls (never a crawl that
        # silently runs once); spider_opened reads it again from the spider (an argument may set it)
        self.policy = RevisitPolicy.for_spider(crawler.spidercls, crawler.settings)
        crawler.signals.connect(self.spider_opened, signal=signals.spider_opened)

    def spider_opened(self, spider: Spider) -> None:
        self.policy = RevisitPolicy.for_spider(spider, self.crawler.settings)
        self.spider_name: str = spider.name

    def process_request(self, request: Request) -> Request | Response | None:
        known = request.meta.get(meta.STATUS)
        if known and self.policy.enabled:
            if known.get("etag"):
                request.headers.setdefault(b"If-None-Match", known["etag"])
            if known.get("last_modified"):
                request.headers.setdefault(b"If-Modified-Since", known["last_modified"])
        return None

    def process_response(self, request: Request, response: Response) -> Request | Response:
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
        moved_from = None
        if known.get("fp") and known["fp"] != fp:  # a revisit of a record the fingerprinter now reads otherwise
            moved_from = {name: known.get(name) for name in ("fp", "fetches", "changes", "unchanged", "first_fetch")}
            self.crawler.stats.inc_value("revisit/records_moved")
            logger.info("The status record of %s moves to its fingerprint as the request fingerprinter reads it today "
                        "(%s, was %s: REQUEST_FINGERPRINTER_CLASS or URL_TRACKING_PARAMS changed)", request.url, fp,
                        known["fp"])
        update = StatusUpdate(
            spider=self.spider_name, fp=fp,
            url=request.url, domain=domain_of(request.url), request=stored_request(request.meta[meta.LEASE_PAYLOAD]),
            fetched_at=time.time(), status=status,
            etag=_text(headers.get(b"ETag")), last_modified=_text(headers.get(b"Last-Modified")),
            signature=signature, interval=new_interval, changed=changed, moved_from=moved_from,
        )
        # once the page's items are stored (a 304: when its lease ends), as the page's judges leave it
        # (crawlhub.signals.page_done); the frontier's warden takes them with the answer
        after_store: list[object] = request.meta.setdefault(meta.AFTER_STORE, [])
        after_store.append(update)
        if known and (200 <= status < 300 or status in (404, 410)):  # a page fetched again: which items went
            after_store.append(GoneCheck(request.url, time.time(), everything=status in (404, 410)))
        stats = self.crawler.stats
        if changed is not None:
            stats.inc_value("revisit/changed" if changed else "revisit/unchanged")
        if status == 304:
            stats.inc_value("revisit/not_modified")  # the callback never sees it; its lease ends, its status is written
            return intent.drop(request, "not modified since the last fetch (304)")
        return response


def _text(value: bytes | None) -> str | None:
    return value.decode("latin-1") if value else None
