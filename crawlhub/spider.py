"""The base spider: seeds from Redis, same-host following.

Follows the scrapy-redis ``RedisSpider`` convention: seeds are read from
``<spider>:start_urls`` (REDIS_START_URLS_KEY, or the spider's ``redis_key``)
whenever the worker is idle, and a worker with nothing to do waits for more
(or closes after MAX_IDLE_TIME_BEFORE_CLOSE seconds, or the spider's
``max_idle_time``). The key may be a list, a set or a sorted set, as with
scrapy-redis' REDIS_START_URLS_AS_SET / _AS_ZSET. A spider's ``start_urls``
seed the shared frontier once per crawl (the first worker to start pushes
them; ``crawlhub reset`` starts a new crawl). Unlike scrapy-redis it is
written for Scrapy 2.13+'s ``start()``, takes plain URLs without a
deprecation warning, and puts a bad seed in ``<spider>:bad_seeds`` with its
reason instead of dropping it. docs/scrapy-redis.md lists what
of scrapy-redis is honoured and what is refused.

A spider for a new domain::

    class ExampleSpider(CrawlhubSpider):
        name = "example"

        def parse(self, response):
            for row in response.css("div.item"):
                yield MyItem(...)
            yield from self.follow_links(response, response.css("a.next::attr(href)").getall())
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import redis
from scrapy import Request, Spider, signals
from scrapy.crawler import Crawler
from scrapy.exceptions import CloseSpider, DontCloseSpider
from scrapy.http import Response
from scrapy.settings import BaseSettings

from crawlhub.components import frontier_of, redis_of
from crawlhub.connection import REDIS_ERRORS, seed_commands, worker_id
from crawlhub.frontier.keys import Keys
from crawlhub.habits import ATTRIBUTES
from crawlhub.meta import SEED_HOST
from crawlhub.revisit.sitemaps import SitemapMixin
from crawlhub.seeds import BadSeed, WrongSeedKey, parse_seed, pop_seeds, push_seeds, seed_callback

if TYPE_CHECKING:
    from typing_extensions import Self

    from crawlhub.frontier.view import FrontierView

IDLE_CHECK_GAP = 15.0  # seconds between idle checks beyond which the worker was not running
IDLE_RECOUNT = 5.0  # seconds between two looks at every partition by an idle worker (a heartbeat's interval)
# Scrapy's certificate-verifying TLS context (Twisted's recommended one for web clients)
VERIFYING_CONTEXT_FACTORY = "scrapy.core.downloader.contextfactory.BrowserLikeContextFactory"


class CrawlhubSpider(SitemapMixin, Spider):
    """Base class of every crawlhub spider."""

    #: Follow only links on the seed's host (set False to leave the host).
    same_host_only = True
    #: Render every page in headless Chromium (docs/browser.md).
    use_browser = False
    #: CSS selectors the data needs: a plain page with none of them is
    #: rendered in the browser (and a domain that keeps needing it, always).
    browser_needs: tuple[str, ...] = ()

    @classmethod
    def crawlhub_settings(cls, settings: BaseSettings) -> None:
        """Settings of this spider that depend on crawlhub's (the add-on calls it after its defaults
        and the environment are in; Scrapy's ``update_settings`` runs before them)."""

    @classmethod
    def update_settings(cls, settings: BaseSettings) -> None:
        super().update_settings(settings)
        for attribute, name in ATTRIBUTES.items():  # scrapy-redis' (the spider's value wins, as there)
            value = getattr(cls, attribute, None)
            if value is not None:
                settings.set(name, value, "spider")

    @classmethod
    def from_crawler(cls, crawler: Crawler, *args: Any, **kwargs: Any) -> Self:
        spider = super().from_crawler(crawler, *args, **kwargs)
        spider.setup_seeds(crawler)
        return spider

    def setup_seeds(self, crawler: Crawler) -> None:
        """Wire the seed feeder. Its settings are read when the spider opens: Scrapy builds the spider
        before add-ons (crawlhub's defaults) are applied."""
        self._server: redis.Redis | None = None
        self._configured = False
        self._idle_since: float | None = None
        self._last_idle_check: float | None = None
        # this idle period's full count of the frontier found nothing: the later checks of the period read the
        # cheap signs only (any work since shows in them: seeds, hints, the live workers' leases)
        self._counted_empty = False
        self._recount_at = 0.0  # (monotonic) the frontier's partitions are not asked again before then
        self._count_busy = False  # what they said the last time
        self._told_how_to_seed = False  # the first wait for seeds says how to push some, once
        crawler.signals.connect(self._configure, signal=signals.spider_opened)
        crawler.signals.connect(self._on_idle, signal=signals.spider_idle)

    def _configure(self, spider: Spider | None=None) -> None:
        if self._configured:
            return
        settings = self.crawler.settings
        keys = Keys.for_spider(settings, self.name)
        self.seeds_key, self.bad_seeds_key = keys.seeds, keys.bad_seeds
        self.seed_batch = (settings.getint("SEED_BATCH_SIZE") or settings.getint("REDIS_START_URLS_BATCH_SIZE")
                           or settings.getint("CONCURRENT_REQUESTS"))
        self.seeded_key = keys.seeded
        self.seeds_as = (settings.getbool("REDIS_START_URLS_AS_SET"), settings.getbool("REDIS_START_URLS_AS_ZSET"))
        self._wrong_key: str | None = None
        self.seed_max_bytes = settings.getint("SEED_MAX_BYTES")
        self.bad_seeds_max = settings.getint("BAD_SEEDS_MAX")
        self.max_idle = settings.getfloat("MAX_IDLE_TIME_BEFORE_CLOSE")
        # `scrapy shell/check/parse` look at pages: no seeds, no waiting for more
        self.shared = settings.getbool("CRAWLHUB_SHARED", True)
        self._configured = True

    @property
    def server(self) -> redis.Redis:
        """The Redis client (connected on first use, so a spider can be built offline)."""
        if self._server is None:
            self._configure()
            self._server = redis_of(self.crawler)
            self.logger.info("Reading seeds from Redis key %r (batch %d)", self.seeds_key, self.seed_batch)
        return self._server

    # -- seeds -------------------------------------------------------------
    async def start(self) -> AsyncIterator[Any]:
        self._configure()
        if not self.shared:
            return
        self.seed_start_urls()
        for request in self.sitemap_requests(self.sitemap_urls):
            yield request
        for request in self.next_seed_requests():
            yield request

    def seed_start_urls(self) -> None:
        """The spider's ``start_urls``, pushed to its seeds once per crawl for the whole cluster: the first worker
        to claim ``<spider>:seeded`` pushes them (``crawlhub reset`` deletes it with the rest of the crawl)."""
        urls = [str(url) for url in getattr(self, "start_urls", None) or ()]
        if not urls:
            return
        claim = json.dumps({"worker": worker_id(), "at": time.time(), "urls": len(urls)})
        if self.server.set(self.seeded_key, claim, nx=True):
            how = push_seeds(self.server, self.seeds_key, urls[::-1], *self.seeds_as)  # LPUSH + RPOP: in their order
            self.logger.info("Seeded the crawl with the spider's %d start_urls (%s %s); every worker reads them from there",
                             len(urls), how, self.seeds_key)
            return
        raw = self.server.get(self.seeded_key)
        done = json.loads(raw) if raw else {}
        self.logger.info("start_urls: already seeded for this crawl by %s at %s (they seed a crawl once; `crawlhub reset "
                         "%s` starts a new crawl)", done.get("worker", "another worker"),
                         time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(done.get("at", 0))), self.name)

    def next_seed_requests(self) -> Iterator[Request]:
        """Pop a batch of seeds (FIFO from a list) and turn them into requests."""
        try:
            raws = pop_seeds(self.server, self.seeds_key, self.seed_batch)
        except WrongSeedKey as exc:  # one clear line per worker; the worker waits for the key to be fixed
            if self._wrong_key != exc.kind:
                self.logger.error("%s; this worker reads no seeds until then", exc)
                self._wrong_key = exc.kind
            self.crawler.stats.set_value("seeds/wrong_key_type", exc.kind)
            return
        self._wrong_key = None
        for raw in raws:
            try:
                yield self.make_request_from_seed(raw)
            except BadSeed as exc:
                self.reject_seed(raw, str(exc))

    def make_request_from_seed(self, raw: bytes) -> Request:
        self._configure()
        seed = parse_seed(raw, self.seed_max_bytes)
        if seed.sitemap:
            self.crawler.stats.inc_value("seeds/accepted")
            return self.sitemap_request(seed.url, meta=seed.meta, priority=seed.priority)
        callback = seed_callback(self, seed.callback) if seed.callback else None
        self.crawler.stats.inc_value("seeds/accepted")
        request = Request(
            seed.url,
            callback=callback,
            method=seed.method,
            headers=seed.headers or None,
            body=seed.body or None,
            meta=dict(seed.meta),
            priority=seed.priority,
            cb_kwargs=seed.cb_kwargs,
            dont_filter=seed.dont_filter,
        )
        # the host as the request's URL has it (Scrapy's: an internationalised name in its IDNA form, as every link's
        # is), not as the seed spells it: else no link of bücher.example would be on the seed's host
        request.meta.setdefault(SEED_HOST, urlsplit(request.url).hostname)
        return request

    def reject_seed(self, raw: bytes, reason: str) -> None:
        self._configure()
        text = raw.decode("utf-8", "backslashreplace")
        shown = text if len(text) <= 200 else text[:200] + "..."
        self.logger.warning("Bad seed %r: %s; moved to %s", shown, reason, self.bad_seeds_key)
        self.crawler.stats.inc_value("seeds/bad")
        record = json.dumps(
            {"seed": text[:16384], "reason": reason, "at": time.time(), "worker": worker_id()},
            ensure_ascii=False,
        )
        with self.server.pipeline() as pipe:
            pipe.lpush(self.bad_seeds_key, record)
            pipe.ltrim(self.bad_seeds_key, 0, self.bad_seeds_max - 1)
            pipe.execute()

    def _on_idle(self, spider: Spider) -> None:
        """Feed seeds when idle; close only when the whole cluster has nothing left.

        A worker whose own share ran dry keeps waiting while any worker holds
        leases, retries are waiting or requests are queued: those can still
        produce work. MAX_IDLE_TIME_BEFORE_CLOSE counts from the moment the
        cluster's frontier is empty (0 = wait for seeds forever).
        """
        if spider is not self:
            return
        self._configure()
        if not self.shared:
            return
        frontier = frontier_of(self.crawler)
        if frontier is not None and frontier.budget_exhausted:
            raise CloseSpider("budget_exhausted")
        scheduled = 0
        try:
            for request in self.next_seed_requests():
                self.crawler.engine.crawl(request)
                scheduled += 1
        except REDIS_ERRORS as exc:  # Redis down: wait for it, never close because of it
            self.logger.warning("Cannot read seeds (%s); waiting", exc)
            raise DontCloseSpider from None
        now = time.monotonic()
        # the engine asks at least every 5 s: a longer gap means this process was stopped (SIGSTOP,
        # a suspended VM), and that time says nothing about the frontier: count from now
        asleep = self._last_idle_check is not None and now - self._last_idle_check > IDLE_CHECK_GAP
        self._last_idle_check = now
        # work queued that was not ready at the last lease round (rate limits, back-offs): not idle, no need to count
        busy = bool(scheduled) or asleep or (frontier is not None and frontier.work_waiting)
        over = self.max_idle > 0 and self._idle_since is not None and now - self._idle_since >= self.max_idle
        if not busy and frontier is not None and self.max_idle > 0:
            # (waiting for seeds forever, nothing needs counting: an idle worker costs Redis nothing more)
            try:
                busy = self._frontier_busy(frontier, last_look=over)
            except Exception as exc:  # noqa: BLE001 - Redis down: not idle, just waiting
                self.logger.warning("Cannot read the frontier (%s); waiting", exc)
                busy = True
        if busy:
            self._counted_empty = False
        elif not self._told_how_to_seed:  # the last start-up line: what reaches this worker's Redis
            self._told_how_to_seed = True
            self.logger.info("Waiting for seeds in %r; seed the crawl with: %s", self.seeds_key,
                             seed_commands(self.crawler.settings, self.name, self.seeds_key))
        if busy or self._idle_since is None:
            self._idle_since = now
            raise DontCloseSpider
        if over:
            self.logger.info("The cluster's frontier has been empty for %.0fs: closing", now - self._idle_since)
            return
        raise DontCloseSpider

    def _frontier_busy(self, frontier: FrontierView, last_look: bool = False) -> bool:
        """Whether the cluster has work left: the cheap signs first (work hinted as queued or delayed, leases
        live workers said they hold at their last heartbeat), then every partition (what the signs cannot show:
        a dead worker's leases not yet reclaimed, another worker's leases before its next heartbeat, links of a
        worker killed before it marked their partition), asked at most every IDLE_RECOUNT seconds and once per
        idle period when it found nothing, so that a waiting worker does not read every partition at each idle
        check (the engine asks at each heartbeat and wake-up; one look is an EXISTS a partition, one on a plain Redis).
        ``last_look``: the worker's wait is over, and it closes unless this finds work: every partition is asked
        again, whatever the period's count said (another worker's leases of the moment before keep it)."""
        if frontier.pending() or frontier.leases_elsewhere:
            return True
        now = time.monotonic()
        if not last_look and self._counted_empty:
            return False
        if not last_look and now < self._recount_at:
            return self._count_busy
        busy = self._count_busy = frontier.left()
        self._counted_empty, self._recount_at = not busy, now + IDLE_RECOUNT
        return busy

    # -- following -----------------------------------------------------------
    def seed_host(self, response: Response) -> str | None:
        return response.meta.get(SEED_HOST) or urlsplit(response.url).hostname

    def follow_links(self, response: Response, urls: Iterable[Any], callback: Callable[..., Any] | None = None,
                     **kwargs: Any) -> Iterator[Request]:
        """``response.follow`` for each URL on the seed's host (carries the seed host on)."""
        host = self.seed_host(response)
        meta = dict(kwargs.pop("meta", None) or {})
        meta[SEED_HOST] = host
        for url in urls:
            if url is None:
                continue
            try:
                request = response.follow(url, callback=callback, meta=meta, **kwargs)
            except ValueError:  # unparseable href
                self.crawler.stats.inc_value("follow/bad_url")
                continue
            if not request.url.startswith(("http://", "https://")):
                continue
            if self.same_host_only and urlsplit(request.url).hostname != host:
                self.crawler.stats.inc_value("follow/offsite_skipped")
                continue
            yield request
