"""ProxyMiddleware (380) picks each request's proxy from its domain's pool; ProxyBanMiddleware (900)
sees a proxied answer before the retry middleware and counts a ban against the proxy, cluster-wide.

The pools, the proxies' state in Redis and its Lua scripts are in :mod:`crawlhub.proxies`;
docs/anti-blocking.md explains the rules.
"""

from __future__ import annotations

import itertools
import json
import logging
import random
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import redis
from scrapy import Spider
from scrapy.crawler import Crawler
from scrapy.exceptions import IgnoreRequest, NotConfigured
from scrapy.http import Request, Response
from scrapy.utils.misc import load_object

from crawlhub import intent, meta
from crawlhub._utils.urls import domain_of
from crawlhub.components import cluster_choice, frontier_of
from crawlhub.connection import REDIS_ERRORS
from crawlhub.frontier.records import text
from crawlhub.frontier.scripts import Script
from crawlhub.frontier.serializer import PER_DOWNLOAD_META
from crawlhub.intent import leased
from crawlhub.proxies import (
    DEAD,
    DOMAINS,
    ESCALATE,
    FAIL,
    HEALTH,
    PROXY,
    REGISTRY,
    STICKY,
    SWITCHES,
    TRIED,
    Proxy,
    ProxyConfigError,
    ban_markers,
    block_reason,
    cool_key,
    parse_pools,
    strikes_key,
    tier_bans_key,
    tier_key,
)

if TYPE_CHECKING:
    from typing_extensions import Self

logger = logging.getLogger(__name__)

ROTATIONS = ("round_robin", "random", "sticky")  # PROXY_ROTATION

@dataclass
class DomainState:
    cool: dict[str, float]
    tier: str
    loaded: float


class ProxyMiddleware:
    """Picks a proxy for each request (order 380); keeps the cluster's proxy state."""

    def __init__(self, crawler: Crawler, pools: dict[str, list[Proxy]]) -> None:
        self.crawler = crawler
        s = crawler.settings
        self.pools = pools
        self.by_id = {p.id: p for ps in pools.values() for p in ps}
        tiers = s.getlist("PROXY_TIERS") or list(pools)
        unknown = [t for t in tiers if t not in pools]
        if unknown:
            raise NotConfigured(f"PROXY_TIERS names pools that are not configured: {unknown}; pools: {list(pools)}")
        self.tiers = tiers
        self.rotation = s.get("PROXY_ROTATION") or "round_robin"
        if self.rotation not in ROTATIONS:
            raise NotConfigured(f"PROXY_ROTATION must be {', '.join(ROTATIONS[:-1])} or {ROTATIONS[-1]}, not {self.rotation!r}")
        self.ban_codes = {int(c) for c in s.getlist("PROXY_BAN_CODES")}
        self.ban_after = max(1, s.getint("PROXY_BAN_AFTER"))
        self.base = s.getfloat("PROXY_COOLDOWN")
        self.most = s.getfloat("PROXY_COOLDOWN_MAX")
        self.dead_after = max(1, s.getint("PROXY_DEAD_AFTER"))
        self.escalate_after = max(1, s.getint("PROXY_ESCALATE_AFTER"))
        self.tier_ttl = max(1, s.getint("PROXY_TIER_TTL"))
        self.max_switches = s.getint("PROXY_MAX_SWITCHES")
        self.refresh = s.getfloat("PROXY_STATE_REFRESH")
        self.errors = tuple(load_object(e) if isinstance(e, str) else e for e in s.getlist("RETRY_EXCEPTIONS"))
        self.rng = random.Random()
        self.counters = {pool: itertools.count() for pool in pools}
        self.domains: dict[str, DomainState] = {}
        self.dead: dict[str, float] = {}
        self.dead_loaded = 0.0
        self.sticky: dict[str, str] = {}
        self.ok: dict[tuple[str, str], int] = {}  # (proxy id, domain) -> successes not yet sent
        self.sent = time.monotonic()
        self._fail: Script | None = None
        self._escalate: Script | None = None
        self._registered = False

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        s = crawler.settings
        try:
            pools = parse_pools(s.getdict("PROXY_POOLS"), s.get("PROXY_FILE") or None)
        except ProxyConfigError as exc:
            raise ProxyConfigError(f"proxies: {exc}") from None
        if not pools:
            raise NotConfigured  # no proxies configured: nothing to do (and nothing to warn about)
        mw = cls(crawler, pools)
        logger.info("Proxies: %s; tiers %s; rotation %s", ", ".join(f"{k} ({len(v)})" for k, v in pools.items()),
                    " -> ".join(mw.tiers), mw.rotation)
        return mw

    # -- Redis ------------------------------------------------------------------
    @property
    def server(self) -> redis.Redis | None:
        frontier = frontier_of(self.crawler)
        return frontier.server if frontier is not None else None

    def _register(self, server: redis.Redis) -> None:
        if self._registered:
            return
        server.hset(REGISTRY, mapping={p.id: json.dumps(p.public()) for p in self.by_id.values()})
        self._fail = Script(server, FAIL)
        self._escalate = Script(server, ESCALATE)
        self._registered = True

    def state(self, domain: str) -> DomainState:
        now = time.monotonic()
        st = self.domains.get(domain)
        if st is not None and now - st.loaded < self.refresh:
            return st
        server = self.server
        if server is None:  # no shared frontier (a unit test, a plain Scrapy scheduler): this worker's view only
            st = self.domains[domain] = st or DomainState({}, "", now)
            return st
        try:
            self._register(server)
            pipe = server.pipeline(transaction=False)
            pipe.hgetall(cool_key(domain)).get(tier_key(domain))
            refresh_dead = now - self.dead_loaded >= self.refresh
            if refresh_dead:
                pipe.hgetall(DEAD)
            sticky = self.rotation == "sticky"
            if sticky:  # the cluster's choice, which another worker or `crawlhub proxies reset` may have changed
                pipe.hget(STICKY, domain)
            out = pipe.execute()
            if refresh_dead:
                self.dead = {k.decode(): float(v) for k, v in out[2].items()}
                self.dead_loaded = now
            if sticky:
                if out[-1]:
                    self.sticky[domain] = out[-1].decode()
                else:
                    self.sticky.pop(domain, None)
            st = DomainState({k.decode(): float(v) for k, v in out[0].items()}, out[1].decode() if out[1] else "", now)
        except REDIS_ERRORS as exc:
            logger.warning("Redis unavailable (%s): proxy state of %s as known so far", exc, domain)
            st = st or DomainState({}, "", now)
            st.loaded = now
        self.domains[domain] = st
        self._send_successes()
        return st

    # -- choosing ---------------------------------------------------------------
    def usable(self, proxy: Proxy, st: DomainState, browser: bool, now: float) -> bool:
        if not (proxy.http or browser) or (browser and proxy.scheme.startswith("socks") and proxy.username):
            return False  # Scrapy speaks HTTP proxies only; Chromium's SOCKS has no authentication
        return st.cool.get(proxy.id, 0) <= now and self.dead.get(proxy.id, 0) <= now

    def choose(self, request: Request) -> Proxy | None:
        domain = domain_of(request.url)
        st = self.state(domain)
        now = time.time()
        browser = bool(request.meta.get("playwright"))
        country = (request.meta.get("proxy_country") or "").lower()
        tried = set(request.meta.get(TRIED) or ())
        bound = self.by_id.get(request.meta.get(meta.SESSION_PROXY) or "")
        if bound is not None and bound.id not in tried and self.usable(bound, st, browser, now):
            return bound  # the session's own proxy (crawlhub.downloadermiddlewares.sessions)
        asked = request.meta.get("proxy_pool")
        if asked and asked not in self.pools:
            logger.warning("%s asks for proxy pool %r, which is not configured (pools: %s)", request.url, asked, list(self.pools))
        if asked in self.pools:
            tiers = [asked]
        else:  # the domain's pool now, then the ones above it
            tiers = self.tiers[self.tiers.index(st.tier):] if st.tier in self.tiers else self.tiers
        for n, pool in enumerate(tiers):
            candidates = [p for p in self.pools[pool] if (not country or p.country == country)
                          and self.usable(p, st, browser, now)]
            fresh = [p for p in candidates if p.id not in tried] or candidates
            if fresh:
                if n and not asked:
                    self._move(domain, tiers[n - 1], pool, "no usable proxy left")
                return self._rotate(pool, fresh, domain)
        return None

    def _rotate(self, pool: str, candidates: list[Proxy], domain: str) -> Proxy:
        if self.rotation == "random":
            return self.rng.choice(candidates)
        if self.rotation == "sticky":
            known = {p.id: p for p in candidates}
            chosen = self.sticky.get(domain)
            if chosen not in known:  # none yet, or it stopped being usable: the cluster's choice
                chosen = cluster_choice(self.server, STICKY, domain, self.rng.choice(candidates).id, known.__contains__)
                self.sticky[domain] = chosen
            return known[chosen]
        return candidates[next(self.counters[pool]) % len(candidates)]

    def _move(self, domain: str, old: str, new: str, why: str) -> None:
        server = self.server
        if server is None:
            return
        try:
            self._register(server)
            assert self._escalate is not None  # (registered)
            now_tier = text(self._escalate(keys=[tier_key(domain)], args=[old, new, self.tiers[0], self.tier_ttl]))
        except REDIS_ERRORS as exc:
            logger.warning("Redis unavailable (%s): %s not moved to proxy pool %s", exc, domain, new)
            return
        self.domains[domain].tier = now_tier
        if now_tier == new:
            self.crawler.stats.inc_value(f"proxy/escalated/{domain}")
            logger.warning("%s: %s in proxy pool %r; every worker uses pool %r for it now", domain, why, old, new)

    def process_request(self, request: Request) -> Request | Response | None:
        meta = request.meta
        if meta.get("dont_proxy") or ("proxy" in meta and PROXY not in meta):
            return None  # no proxy wanted, or the spider chose one itself
        for key in PER_DOWNLOAD_META:
            meta.pop(key, None)
        request.headers.pop(b"Proxy-Authorization", None)
        proxy = self.choose(request)
        if proxy is None:
            return self._none_left(request)
        meta[PROXY] = proxy.id
        if meta.get("playwright"):
            server = {"server": proxy.address}
            if proxy.username:
                server.update(username=proxy.username, password=proxy.password)
            meta["playwright_context"] = f"proxy:{proxy.id}"
            meta["playwright_context_kwargs"] = {"proxy": server}
        else:
            meta["proxy"] = proxy.address  # Scrapy's HttpProxyMiddleware keeps our Proxy-Authorization
            auth = proxy.authorization()
            if auth:
                request.headers[b"Proxy-Authorization"] = auth
        self.crawler.stats.inc_value(f"proxy/requests/{proxy.pool}")
        return None

    def _none_left(self, request: Request) -> Request:
        domain = domain_of(request.url)
        st = self.domains.get(domain)
        now = time.time()
        waits = [u - now for u in (st.cool.values() if st else ()) if u > now] + [u - now for u in self.dead.values() if u > now]
        wait = min(waits) if waits else self.base
        self.crawler.stats.inc_value("proxy/none_healthy")
        reason = f"no healthy proxy for {domain}"
        if leased(request):  # waits as a retry through the shared frontier (then the DLQ)
            return intent.retry(request, reason, after=max(1.0, wait))
        raise IgnoreRequest(reason)

    # -- outcomes (called by ProxyBanMiddleware) ---------------------------------
    def banned(self, request: Request, reason: str) -> Request | None:
        """Record the failure; a request to fetch again through another proxy, or None."""
        proxy = self.by_id.get(request.meta.get(PROXY, ""))
        if proxy is None:
            return None
        domain = domain_of(request.url)
        self._record_failure(proxy, domain, reason)
        switches = request.meta.get(SWITCHES, 0)
        if switches >= self.max_switches:
            logger.info("%s: %s through proxy %s; %d proxies tried, keeping this answer",
                        request.url, reason, proxy.id, switches + 1)
            return None
        again = request.replace(dont_filter=True)
        for key in PER_DOWNLOAD_META:
            again.meta.pop(key, None)
        again.meta.pop(PROXY, None)
        again.headers.pop(b"Proxy-Authorization", None)
        again.meta[SWITCHES] = switches + 1
        again.meta[TRIED] = sorted({*(request.meta.get(TRIED) or ()), proxy.id})
        again.meta[meta.SAME_PAGE] = True  # replaces its lease: not a new attempt of the page
        self.crawler.stats.inc_value("proxy/switched")
        logger.info("%s: %s through proxy %s; fetching it again through another proxy", request.url, reason, proxy.id)
        return again

    def _record_failure(self, proxy: Proxy, domain: str, reason: str) -> None:
        stats = self.crawler.stats
        stats.inc_value(f"proxy/failures/{proxy.id}")
        server = self.server
        if server is None:
            return
        i = self.tiers.index(proxy.pool) if proxy.pool in self.tiers else -1
        nxt = self.tiers[i + 1] if 0 <= i < len(self.tiers) - 1 else ""
        args = {"id": proxy.id, "domain": domain, "pool": proxy.pool, "reason": reason[:200], "strikes": strikes_key(domain),
                "health": HEALTH, "domains": DOMAINS, "cool": cool_key(domain), "dead": DEAD, "tier": tier_key(domain),
                "tierbans": tier_bans_key(domain, proxy.pool), "first": self.tiers[0], "next": nxt,
                "ban_after": self.ban_after, "base": self.base, "most": self.most, "dead_after": self.dead_after,
                "escalate_after": self.escalate_after, "tier_ttl": self.tier_ttl}
        try:
            self._register(server)
            assert self._fail is not None  # (registered)
            strikes, until, escalated, dead = self._fail(args=[json.dumps(args)])
        except REDIS_ERRORS as exc:
            logger.warning("Redis unavailable (%s): failure of proxy %s on %s not recorded", exc, proxy.id, domain)
            return
        until, dead = float(until), float(dead)
        st = self.domains.get(domain)
        if until and st is not None:
            st.cool[proxy.id] = until
        if until:
            stats.inc_value(f"proxy/cooldowns/{proxy.id}")
            logger.warning("Proxy %s cools down on %s for %.0fs after %d failures in a row (last: %s)",
                           proxy.id, domain, until - time.time(), int(strikes), reason)
        if dead:
            self.dead[proxy.id] = dead
            logger.warning("Proxy %s failed %d times in a row on every domain: dead for %.0fs",
                           proxy.id, self.dead_after, self.most)
        if escalated:
            if st is not None:
                st.tier = escalated.decode()
            stats.inc_value(f"proxy/escalated/{domain}")
            logger.warning("%s keeps blocking proxy pool %r: every worker uses pool %r for it now", domain, proxy.pool,
                           escalated.decode())

    def succeeded(self, request: Request) -> None:
        proxy_id = request.meta.get(PROXY)
        if proxy_id in self.by_id:
            key = (proxy_id, domain_of(request.url))
            self.ok[key] = self.ok.get(key, 0) + 1
            if time.monotonic() - self.sent >= 1.0:
                self._send_successes()

    def _send_successes(self) -> None:
        """Successes go to Redis in one pipeline a second: counters, and the failure streaks end."""
        if not self.ok or (server := self.server) is None:
            return
        ok, self.ok, self.sent = self.ok, {}, time.monotonic()
        try:
            pipe = server.pipeline(transaction=False)
            for (proxy_id, domain), n in ok.items():
                pipe.hincrby(HEALTH, f"{proxy_id}:ok", n)
                pipe.hset(HEALTH, f"{proxy_id}:streak", 0)
                pipe.hdel(strikes_key(domain), proxy_id)
            pipe.execute()
        except REDIS_ERRORS as exc:
            logger.warning("Redis unavailable (%s): proxy successes held until it is back", exc)
            for key, n in ok.items():
                self.ok[key] = self.ok.get(key, 0) + n

    def close(self) -> None:
        self._send_successes()


def is_proxy_error(exception: BaseException, errors: tuple[Any, ...]) -> bool:
    """A connection-level failure (through a proxy it is the proxy's until shown otherwise)."""
    if isinstance(exception, IgnoreRequest):
        return False
    if errors and isinstance(exception, errors):
        return True
    text = str(exception)
    return any(marker in text for marker in ("ERR_PROXY", "ERR_TUNNEL", "ERR_CONNECTION_REFUSED", "ERR_CONNECTION_RESET",
                                             "ERR_TIMED_OUT", "ERR_CONNECTION_CLOSED", "ERR_EMPTY_RESPONSE"))


class ProxyBanMiddleware:
    """Sees each raw answer of a proxied request first (order 900): bans, and the switch to another proxy."""

    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler
        self._picker: ProxyMiddleware | None = None
        self._markers: list[str] | None = None

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        s = crawler.settings
        if not (s.getdict("PROXY_POOLS") or s.get("PROXY_FILE")):
            raise NotConfigured  # no proxies configured
        mw = cls(crawler)
        from scrapy import signals

        crawler.signals.connect(mw.spider_closed, signal=signals.spider_closed)
        return mw

    @property
    def picker(self) -> ProxyMiddleware | None:
        if self._picker is None:
            self._picker = self.crawler.get_downloader_middleware(ProxyMiddleware)
        return self._picker

    def spider_closed(self, spider: Spider) -> None:
        if self.picker is not None:
            self.picker.close()

    def ban_reason(self, response: Response) -> str:
        picker = self.picker
        assert picker is not None  # (process_response asks only with a picker)
        if self._markers is None:  # the settings' and the spider's, once
            self._markers = ban_markers(self.crawler.settings, self.crawler.spider)
        return block_reason(response, picker.ban_codes, self._markers, None)  # (a spider's is_blocked: the ladder's)

    def process_response(self, request: Request, response: Response) -> Request | Response:
        picker = self.picker
        if picker is None or PROXY not in request.meta:
            return response
        reason = self.ban_reason(response)
        if not reason:
            picker.succeeded(request)
            return response
        again = picker.banned(request, reason)
        return again if again is not None else response

    def process_exception(self, request: Request, exception: BaseException) -> Request | Response | None:
        picker = self.picker
        if picker is None or PROXY not in request.meta or not is_proxy_error(exception, picker.errors):
            return None
        reason = f"{type(exception).__name__}: {str(exception).splitlines()[0] if str(exception) else ''}"[:200]
        return picker.banned(request, reason)
