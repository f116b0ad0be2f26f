"""Proxy pools, rotation, and ban detection shared by the whole cluster.

- Pools come from ``PROXY_POOLS`` (``{"datacenter": ["http://user:pw@host:port", ...],
  "residential": [...]}``, also as JSON in the environment) and/or
  ``PROXY_FILE`` (one proxy per line: ``URL [pool=NAME] [country=CC] [name=ID]``).
  Each proxy is known by an id (its name, or ``pool/host:port``, plus a short
  hash of the user name when several share an address): the only thing logs,
  stats, Redis and ``crawlhub status`` ever show. Credentials stay in memory.
- ``ProxyMiddleware`` (order 380) picks a proxy per request: the domain's
  tier (``PROXY_TIERS``, cheapest first), or ``meta["proxy_pool"]`` /
  ``meta["proxy_country"]``; ``PROXY_ROTATION`` round_robin, random, or
  sticky per domain (cluster-wide). It skips proxies cooling down for the
  domain and dead ones, as every worker records them in Redis.
- ``ProxyBanMiddleware`` (order 900, next to the download) sees each raw
  answer first: a ban code (``PROXY_BAN_CODES``), a body marker
  (``PROXY_BAN_MARKERS`` and the spider's ``ban_markers``) or a connection
  error marks the proxy for that domain; after ``PROXY_BAN_AFTER`` in a row
  it cools down for ``PROXY_COOLDOWN`` seconds, doubling each time up to
  ``PROXY_COOLDOWN_MAX``. The page is fetched again at once through another
  proxy, which is not an attempt of the page: its retry count and the DLQ do
  not see it (at most ``PROXY_MAX_SWITCHES`` times, then the answer is the
  page's). After ``PROXY_ESCALATE_AFTER`` bans in a tier, or when none of
  its proxies is usable, the domain moves to the next tier for every worker
  (``PROXY_TIER_TTL`` seconds). With no usable proxy at all, the page waits
  as a retry and ends in the DLQ as "no healthy proxy".

docs/anti-blocking.md has the rules, settings and Redis keys.
"""

from __future__ import annotations

import base64
import hashlib
import itertools
import json
import logging
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urlsplit

import redis
from scrapy.exceptions import IgnoreRequest, NotConfigured
from scrapy.utils.misc import load_object

from crawlhub.frontier.leases import domain_of
from crawlhub.frontier.scripts import source
from crawlhub.frontier.serializer import PER_DOWNLOAD_META
from crawlhub.frontier.serializer import PROXY_CHOSEN as PROXY
from crawlhub.middlewares import cluster_choice, frontier_scheduler

logger = logging.getLogger(__name__)

REGISTRY = "crawlhub:proxies"  # hash: proxy id -> JSON (pool, scheme, host, port, country): no credentials
HEALTH = "crawlhub:proxy:health"  # hash: <id>:ok, <id>:fail, <id>:streak, <id>:error, <id>:used
DEAD = "crawlhub:proxy:dead"  # hash: proxy id -> dead until (unix time)
DOMAINS = "crawlhub:proxy:domains"  # set: domains with proxy state
STICKY = "crawlhub:proxy:sticky"  # hash: domain -> proxy id (PROXY_ROTATION = sticky)


def cool_key(domain: str) -> str:
    return f"crawlhub:proxy:cool:{domain}"  # hash: proxy id -> cooling until (unix time)


def strikes_key(domain: str) -> str:
    return f"crawlhub:proxy:strikes:{domain}"  # hash: proxy id -> failures in a row on the domain


def tier_key(domain: str) -> str:
    return f"crawlhub:proxy:tier:{domain}"  # string (expires): the pool the domain uses now


def tier_bans_key(domain: str, pool: str) -> str:
    return f"crawlhub:proxy:tierbans:{domain}:{pool}"  # counter (expires): bans in that pool


SCHEMES = {"http", "https", "socks5", "socks5h", "socks4"}
# meta keys that hold a proxy's address or credentials for one download: never stored
TRIED = "crawlhub_proxy_tried"  # meta: ids this page was already banned on
SWITCHES = "crawlhub_proxy_switches"  # meta: immediate re-fetches through another proxy


class ProxyConfigError(ValueError):
    """A proxy list that cannot be used, with where and why (never the credentials)."""


@dataclass(frozen=True)
class Proxy:
    id: str
    pool: str
    scheme: str
    host: str
    port: int
    country: str = ""
    username: str = field(default="", repr=False)
    password: str = field(default="", repr=False)

    def __repr__(self) -> str:  # never the credentials
        return f"Proxy({self.id})"

    __str__ = __repr__

    @property
    def address(self) -> str:
        """scheme://host:port: no credentials."""
        return f"{self.scheme}://{self.host}:{self.port}"

    @property
    def http(self) -> bool:
        """Scrapy's HTTP client speaks to HTTP(S) proxies only; SOCKS ones serve the browser."""
        return self.scheme in ("http", "https")

    def authorization(self) -> bytes | None:
        if not self.username:
            return None
        return b"Basic " + base64.b64encode(f"{self.username}:{self.password}".encode("latin-1"))

    def public(self) -> dict:
        return {"id": self.id, "pool": self.pool, "scheme": self.scheme, "host": self.host, "port": self.port,
                "country": self.country}


def parse_proxy(url: str, pool: str, country: str = "", name: str = "", where: str = "") -> Proxy:
    where = where or f"pool {pool!r}"
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError as exc:
        raise ProxyConfigError(f"{where}: not a proxy URL ({exc})") from None
    scheme = (parts.scheme or "").lower()
    if scheme not in SCHEMES:
        raise ProxyConfigError(f"{where}: scheme {scheme or '(none)'!r} is not one of {', '.join(sorted(SCHEMES))}")
    if not parts.hostname or port is None:
        raise ProxyConfigError(f"{where}: a proxy URL needs a host and a port ({scheme}://host:port)")
    user, password = unquote(parts.username or ""), unquote(parts.password or "")
    ident = name or f"{pool}/{parts.hostname}:{port}"
    if user and not name:  # providers put the session or country in the user name: same address, other proxy
        ident += "#" + hashlib.sha256(user.encode()).hexdigest()[:6]
    return Proxy(ident, pool, scheme, parts.hostname, port, country.lower(), user, password)


def parse_pools(pools: dict | None = None, file: str | Path | None = None) -> dict[str, list[Proxy]]:
    """Pools from PROXY_POOLS (a dict) and PROXY_FILE, in declaration order."""
    out: dict[str, list[Proxy]] = {}
    for pool, entries in (pools or {}).items():
        if isinstance(entries, str):
            entries = [e for e in entries.replace(",", " ").split() if e]
        if not isinstance(entries, list):
            raise ProxyConfigError(f"PROXY_POOLS[{pool!r}] must be a list of proxy URLs")
        for n, entry in enumerate(entries):
            where = f"PROXY_POOLS[{pool!r}][{n}]"
            if isinstance(entry, dict):
                proxy = parse_proxy(str(entry.get("url", "")), pool, str(entry.get("country", "")),
                                    str(entry.get("name", "")), where)
            else:
                proxy = parse_proxy(str(entry), pool, where=where)
            out.setdefault(pool, []).append(proxy)
    if file:
        path = Path(file)
        try:
            lines = path.read_text().splitlines()
        except OSError as exc:
            raise ProxyConfigError(f"PROXY_FILE {path}: {exc.strerror}") from None
        for lineno, line in enumerate(lines, 1):
            line = line.split("#", 1)[0].strip() if not line.lstrip().startswith("#") else ""
            if not line:
                continue
            url, *options = line.split()
            opts = {}
            for option in options:
                key, eq, value = option.partition("=")
                if not eq or key not in ("pool", "country", "name"):
                    raise ProxyConfigError(f"PROXY_FILE {path}:{lineno}: unknown option {key!r} (pool=, country=, name=)")
                opts[key] = value
            pool = opts.get("pool", "default")
            out.setdefault(pool, []).append(
                parse_proxy(url, pool, opts.get("country", ""), opts.get("name", ""), f"PROXY_FILE {path}:{lineno}"))
    ids = [p.id for ps in out.values() for p in ps]
    dupes = sorted({i for i in ids if ids.count(i) > 1})
    if dupes:
        raise ProxyConfigError(f"the same proxy is listed twice: {', '.join(dupes)} (give one a name=)")
    return out


def cooldown(strikes: int, ban_after: int, base: float, most: float) -> float:
    """Seconds a proxy cools down on a domain after ``strikes`` failures in a row (0: not yet)."""
    if strikes < ban_after:
        return 0.0
    return min(most, base * 2 ** (strikes - ban_after))


# One failure of a proxy on a domain; a domain moving to the next pool (crawlhub/frontier/lua/)
FAIL, ESCALATE = source("proxy_fail"), source("proxy_escalate")


@dataclass
class DomainState:
    cool: dict[str, float]
    tier: str
    loaded: float


class ProxyMiddleware:
    """Picks a proxy for each request (order 380); keeps the cluster's proxy state."""

    def __init__(self, crawler, pools: dict[str, list[Proxy]]):
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
        if self.rotation not in ("round_robin", "random", "sticky"):
            raise NotConfigured(f"PROXY_ROTATION must be round_robin, random or sticky, not {self.rotation!r}")
        self.ban_codes = {int(c) for c in s.getlist("PROXY_BAN_CODES")}
        self.markers = [m.lower() for m in s.getlist("PROXY_BAN_MARKERS")]
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
        self._fail = self._escalate = None
        self._registered = False

    @classmethod
    def from_crawler(cls, crawler):
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
    def server(self):
        scheduler = frontier_scheduler(self.crawler, "server")
        return scheduler.server if scheduler is not None else None

    def _register(self, server) -> None:
        if self._registered:
            return
        server.hset(REGISTRY, mapping={p.id: json.dumps(p.public()) for p in self.by_id.values()})
        self._fail = server.register_script(FAIL)
        self._escalate = server.register_script(ESCALATE)
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
            out = pipe.execute()
            if refresh_dead:
                self.dead = {k.decode(): float(v) for k, v in out[2].items()}
                self.dead_loaded = now
            st = DomainState({k.decode(): float(v) for k, v in out[0].items()}, out[1].decode() if out[1] else "", now)
        except redis.RedisError as exc:
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

    def choose(self, request) -> Proxy | None:
        domain = domain_of(request.url)
        st = self.state(domain)
        now = time.time()
        browser = bool(request.meta.get("playwright"))
        country = (request.meta.get("proxy_country") or "").lower()
        tried = set(request.meta.get(TRIED) or ())
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
            now_tier = self._escalate(keys=[tier_key(domain)], args=[old, new, self.tiers[0], self.tier_ttl]).decode()
        except redis.RedisError as exc:
            logger.warning("Redis unavailable (%s): %s not moved to proxy pool %s", exc, domain, new)
            return
        self.domains[domain].tier = now_tier
        if now_tier == new:
            self.crawler.stats.inc_value(f"proxy/escalated/{domain}")
            logger.warning("%s: %s in proxy pool %r; every worker uses pool %r for it now", domain, why, old, new)

    def process_request(self, request):
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

    def _none_left(self, request):
        domain = domain_of(request.url)
        st = self.domains.get(domain)
        now = time.time()
        waits = [u - now for u in (st.cool.values() if st else ()) if u > now] + [u - now for u in self.dead.values() if u > now]
        wait = min(waits) if waits else self.base
        self.crawler.stats.inc_value("proxy/none_healthy")
        scheduler = frontier_scheduler(self.crawler, "retry")
        reason = f"no healthy proxy for {domain}"
        if scheduler is not None and scheduler.retry(request, reason, retry_after=max(1.0, wait)):
            raise IgnoreRequest(f"{reason}: waiting {wait:.0f}s as a retry (then the DLQ)")
        raise IgnoreRequest(reason)

    # -- outcomes (called by ProxyBanMiddleware) ---------------------------------
    def banned(self, request, reason: str):
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
        again.meta["crawlhub_same_page"] = True  # replaces its lease: not a new attempt of the page
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
            strikes, until, escalated, dead = self._fail(args=[json.dumps(args)])
        except redis.RedisError as exc:
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

    def succeeded(self, request) -> None:
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
                pipe.hincrby(HEALTH, f"{proxy_id}:ok", n).hset(HEALTH, f"{proxy_id}:streak", 0)
                pipe.hdel(strikes_key(domain), proxy_id)
            pipe.execute()
        except redis.RedisError as exc:
            logger.warning("Redis unavailable (%s): proxy successes held until it is back", exc)
            for key, n in ok.items():
                self.ok[key] = self.ok.get(key, 0) + n

    def close(self) -> None:
        self._send_successes()


def is_proxy_error(exception, errors: tuple) -> bool:
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

    def __init__(self, crawler):
        self.crawler = crawler
        self._picker = None
        self._markers: list[str] | None = None

    @classmethod
    def from_crawler(cls, crawler):
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

    def spider_closed(self, spider):
        if self.picker is not None:
            self.picker.close()

    def ban_reason(self, response) -> str:
        picker = self.picker
        if response.status in picker.ban_codes:
            return f"HTTP {response.status}"
        if self._markers is None:  # the settings' and the spider's, once
            self._markers = [*picker.markers, *(m.lower() for m in getattr(self.crawler.spider, "ban_markers", ()) or ())]
        if self._markers and hasattr(response, "text"):
            text = response.text[:200_000].lower()
            for marker in self._markers:
                if marker in text:
                    return f"ban marker {marker!r}"
        return ""

    def process_response(self, request, response):
        picker = self.picker
        if picker is None or PROXY not in request.meta:
            return response
        reason = self.ban_reason(response)
        if not reason:
            picker.succeeded(request)
            return response
        again = picker.banned(request, reason)
        return again if again is not None else response

    def process_exception(self, request, exception):
        picker = self.picker
        if picker is None or PROXY not in request.meta or not is_proxy_error(exception, picker.errors):
            return None
        reason = f"{type(exception).__name__}: {str(exception).splitlines()[0] if str(exception) else ''}"[:200]
        return picker.banned(request, reason)


def proxy_health(server) -> dict:
    """Each known proxy's state for `crawlhub status` / `crawlhub proxies` (ids only, never credentials).

    {"proxies": [{id, pool, host, port, country, state: ok|cooling|dead, until, cooling_on,
                  ok, failures, success_rate, last_error}], "tiers": {domain: pool}}
    """
    now = time.time()
    registry = {k.decode(): json.loads(v) for k, v in server.hgetall(REGISTRY).items()}
    health = {k.decode(): v.decode() for k, v in server.hgetall(HEALTH).items()}
    dead = {k.decode(): float(v) for k, v in server.hgetall(DEAD).items()}
    domains = sorted(d.decode() for d in server.smembers(DOMAINS))
    pipe = server.pipeline(transaction=False)
    for d in domains:
        pipe.hgetall(cool_key(d)).get(tier_key(d))
    out = pipe.execute()
    cooling: dict[str, dict[str, float]] = {}
    tiers = {}
    for i, d in enumerate(domains):
        for pid, until in out[2 * i].items():
            if float(until) > now:
                cooling.setdefault(pid.decode(), {})[d] = float(until)
        if out[2 * i + 1]:
            tiers[d] = out[2 * i + 1].decode()
    rows = []
    for pid in sorted(set(registry) | {k.rsplit(":", 1)[0] for k in health}):
        info = registry.get(pid, {"id": pid})
        ok, fail = int(health.get(f"{pid}:ok", 0)), int(health.get(f"{pid}:fail", 0))
        state, until = "ok", None
        if dead.get(pid, 0) > now:
            state, until = "dead", dead[pid]
        elif pid in cooling:
            state, until = "cooling", max(cooling[pid].values())
        rows.append({**info, "id": pid, "state": state, "until": until, "cooling_on": cooling.get(pid, {}),
                     "ok": ok, "failures": fail, "success_rate": round(ok / (ok + fail), 3) if ok + fail else None,
                     "last_error": health.get(f"{pid}:error", "")})
    return {"proxies": rows, "tiers": tiers}


def format_health(health: dict) -> list[str]:
    lines = []
    for p in health["proxies"]:
        when = time.strftime("%H:%M:%S", time.localtime(p["until"])) if p["until"] else ""
        state = {"ok": "ok", "cooling": f"cooling until {when}", "dead": f"dead until {when}"}[p["state"]]
        rate = f"{p['success_rate'] * 100:.0f}%" if p["success_rate"] is not None else "-"
        where = f" on {', '.join(sorted(p['cooling_on']))}" if p["state"] == "cooling" else ""
        error = f"  last error: {p['last_error']}" if p["last_error"] and p["state"] != "ok" else ""
        lines.append(f"  {p['id']:40} {p.get('pool', '?'):12} {state}{where}  ok={p['ok']} failed={p['failures']} "
                     f"success={rate}{error}")
    for domain, pool in sorted(health["tiers"].items()):
        lines.append(f"  {domain} uses pool {pool!r}")
    return lines
