"""SharedRobotsMiddleware: one robots.txt per origin for the whole cluster.

Replaces Scrapy's RobotsTxtMiddleware (same place, 100). Scrapy fetches
robots.txt once per process; with N workers a site sees N fetches, and each
worker may disagree about a page. Here:

* the first worker that needs an origin's robots.txt takes a lock in Redis
  (``crawlhub:robots:<origin>:lock``), fetches it (in the politeness slot
  of the request that needed it; that request then takes the next one) and stores the outcome in ``crawlhub:robots:<origin>``
  for ROBOTSTXT_TTL seconds; the other workers wait for it and read it
  there. Each worker also keeps the parsed file in memory until it expires;
* robots.txt is always fetched over plain HTTP, also for spiders that render
  their pages in the browser (Chromium would show the file as an HTML page);
* the rules are Google's: 2xx = the rules (parsed with Protego, Scrapy's
  parser; the file is cut at ROBOTSTXT_MAX_BYTES); 4xx other than 429 =
  allow all; 5xx or 429 = disallow all for ROBOTSTXT_ERROR_RETRY seconds, no
  answer at all (refused, unresolved, a timeout, TLS) for
  ROBOTSTXT_UNREACHABLE_RETRY (60 s): the origin's requests wait in the frontier
  (no attempt is counted) and robots.txt is fetched again when they are due;
  a request that waited ROBOTSTXT_UNAVAILABLE_MAX_WAITS times goes to the DLQ
  with the reason (a host that is down, refuses or fails TLS never hangs a crawl);
* Crawl-delay for our user agent becomes a floor on the domain's interval
  between requests (cluster-wide, see docs/politeness.md);
* a disallowed URL is dropped (its lease is acked, it is not retried) and
  counted: ``robotstxt/forbidden`` in the worker's stats and
  ``robots_disallowed:<domain>`` in ``<spider>:stats``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import redis
from protego import Protego
from scrapy import Request
from scrapy.crawler import Crawler
from scrapy.exceptions import IgnoreRequest, NotConfigured
from scrapy.http import Response
from scrapy.http.request import NO_CALLBACK
from scrapy.utils.httpobj import urlparse_cached

from crawlhub import intent, meta
from crawlhub._utils.urls import domain_of
from crawlhub.components import FrontierMiddleware
from crawlhub.connection import REDIS_ERRORS
from crawlhub.frontier import keys
from crawlhub.frontier.view import FrontierView
from crawlhub.intent import leased
from crawlhub.meta import LEASE, RESLOT, SLOT_TAKEN

logger = logging.getLogger(__name__)

PREFIX = keys.ROBOTS  # + origin: a robots.txt; + origin:lock
ROBOTS_WAITS = meta.ROBOTS_WAITS
ALLOW, RULES, ERROR = "allow", "rules", "error"


@dataclass
class Robots:
    """What one origin's robots.txt says, and until when."""

    state: str  # ALLOW | RULES | ERROR
    expires: float  # epoch seconds
    body: str = ""
    status: int | None = None
    error: str = ""
    fetched: float = 0.0
    parser: Protego | None = None

    def __post_init__(self) -> None:
        if self.state == RULES and self.parser is None:
            self.parser = Protego.parse(self.body)

    def to_redis(self) -> dict[str, Any]:
        return {"state": self.state, "expires": self.expires, "body": self.body, "status": self.status or "",
                "error": self.error, "fetched": self.fetched}

    @classmethod
    def from_redis(cls, raw: Mapping[bytes, bytes]) -> Robots | None:
        if not raw:
            return None
        d = {k.decode(): v.decode("utf-8", "replace") for k, v in raw.items()}
        return cls(state=d.get("state", ALLOW), expires=float(d.get("expires", 0)), body=d.get("body", ""),
                   status=int(d["status"]) if d.get("status") else None, error=d.get("error", ""),
                   fetched=float(d.get("fetched", 0)))

    def allowed(self, url: str, agent: str) -> bool:
        if self.state == ALLOW:
            return True
        if self.state == ERROR:
            return False
        assert self.parser is not None  # (RULES: parsed)
        return bool(self.parser.can_fetch(url, agent))

    def crawl_delay(self, agent: str) -> float | None:
        if self.state != RULES:
            return None
        assert self.parser is not None
        delay = self.parser.crawl_delay(agent)
        return float(delay) if delay else None


def origin_of(request: Request) -> str:
    parts = urlparse_cached(request)
    return f"{parts.scheme}://{parts.netloc.rpartition('@')[2].lower()}"


class SharedRobotsMiddleware(FrontierMiddleware):

    def __init__(self, crawler: Crawler) -> None:
        settings = crawler.settings
        if not settings.getbool("ROBOTSTXT_OBEY"):
            raise NotConfigured
        super().__init__(crawler)
        self.agent = settings.get("ROBOTSTXT_USER_AGENT") or settings.get("USER_AGENT") or "*"
        self.ttl = settings.getfloat("ROBOTSTXT_TTL")
        self.error_retry = settings.getfloat("ROBOTSTXT_ERROR_RETRY")
        # no answer at all (a dead host): asked again sooner, so that its requests end in bounded time
        self.unreachable_retry = min(self.error_retry, settings.getfloat("ROBOTSTXT_UNREACHABLE_RETRY"))
        self.timeout = settings.getfloat("ROBOTSTXT_TIMEOUT")
        self.max_bytes = settings.getint("ROBOTSTXT_MAX_BYTES")
        self.max_waits = settings.getint("ROBOTSTXT_UNAVAILABLE_MAX_WAITS")
        self.cache: dict[str, Robots] = {}
        self.pending: dict[str, asyncio.Future[Robots]] = {}

    async def process_request(self, request: Request) -> Request | Response | None:
        if request.meta.get("dont_obey_robotstxt") or not request.url.startswith(("http://", "https://")):
            return None
        frontier = self.frontier
        if frontier is None:
            return None
        robots = await self.robots_for(request, frontier)
        if robots.allowed(request.url, self.agent):
            return None
        if robots.state == ERROR:
            waits = request.meta.get(ROBOTS_WAITS, 0) + 1
            reason = f"robots.txt of {origin_of(request)} unavailable ({robots.error})"
            if not leased(request):
                raise IgnoreRequest(f"{reason}: not fetched")
            if waits > self.max_waits:
                return intent.dead_letter(request, f"{reason}, {waits - 1} times", status=robots.status)
            wait = max(1.0, robots.expires - time.time())
            request.meta[ROBOTS_WAITS] = waits
            return intent.postpone(request, wait, f"{reason}, wait {waits} of {self.max_waits}")
        domain = domain_of(request.url)
        self.crawler.stats.inc_value("robotstxt/forbidden")
        frontier.count(f"robots_disallowed:{domain}")
        logger.debug("Forbidden by robots.txt: %s", request.url)
        raise IgnoreRequest("Forbidden by robots.txt")

    async def robots_for(self, request: Request, frontier: FrontierView) -> Robots:
        origin = origin_of(request)
        cached = self.cache.get(origin)
        if cached is not None and cached.expires > time.time():
            return cached
        # the request waits for robots.txt: the slot it was leased for is gone
        # (used by the robots.txt fetch, or simply past); it takes a new one
        request.meta[RESLOT] = True
        if origin in self.pending:  # another request of this worker is already on it
            return await asyncio.shield(self.pending[origin])
        future = self.pending[origin] = asyncio.get_running_loop().create_future()
        try:
            try:
                robots = await self._load(origin, request, frontier)
            except REDIS_ERRORS as exc:
                logger.warning("Redis unavailable (%s): fetching robots.txt of %s for this worker only", exc, origin)
                robots = await self._fetch(origin, request)
                robots.expires = min(robots.expires, time.time() + 60)
            self.cache[origin] = robots
            future.set_result(robots)
            return robots
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # retrieved: no "never retrieved" warning when nobody waits
            raise
        finally:
            del self.pending[origin]

    async def _load(self, origin: str, request: Request, frontier: FrontierView) -> Robots:
        """From Redis; else fetch it (one worker, under a lock) and store it there."""
        server = frontier.server
        key, lock = PREFIX + origin, PREFIX + origin + ":lock"
        lock_ms = int((self.timeout + 10) * 1000)
        delay = 0.05
        while True:
            robots = Robots.from_redis(server.hgetall(key))  # type: ignore[arg-type]  # (bytes replies)
            if robots is not None and robots.expires > time.time():
                return robots
            if server.set(lock, frontier.worker, nx=True, px=lock_ms):
                break
            await asyncio.sleep(delay)  # another worker is fetching it
            delay = min(delay * 2, 0.5)
        try:
            robots = await self._fetch(origin, request)
            server.hset(key, mapping=robots.to_redis())  # type: ignore[arg-type]
            server.expireat(key, int(robots.expires) + 1)
            frontier.politeness.set_crawl_delay(domain_of(request.url), robots.crawl_delay(self.agent))
        finally:
            server.delete(lock)
        return robots

    async def _fetch(self, origin: str, for_request: Request) -> Robots:
        url = f"{origin}/robots.txt"
        robots_request = Request(
            url, priority=1000, callback=NO_CALLBACK,
            # fetched for a leased request: it goes out in that request's slot
            # always plain HTTP: Chromium would wrap the file in HTML and the rules would not parse
            meta={"dont_obey_robotstxt": True, "dont_retry": True, "download_timeout": self.timeout,
                  "browser": False, "playwright": False,
                  # no session: a session's login would wait for this very file (its requests obey it too)
                  meta.NO_SESSION: True,
                  SLOT_TAKEN: bool(for_request.meta.get(LEASE))},
        )
        stats = self.crawler.stats
        stats.inc_value("robotstxt/request_count")
        now = time.time()
        try:
            response = await self.crawler.engine.download_async(robots_request)
        except Exception as exc:  # noqa: BLE001 - any failure means "unreachable"
            stats.inc_value(f"robotstxt/exception_count/{type(exc).__name__}")
            logger.warning("robots.txt of %s unreachable (%s): its URLs wait %ss", origin, exc, self.unreachable_retry)
            return Robots(ERROR, now + self.unreachable_retry, error=f"{type(exc).__name__}: {exc}"[:300], fetched=now)
        status = response.status
        stats.inc_value("robotstxt/response_count")
        stats.inc_value(f"robotstxt/response_status_count/{status}")
        if 200 <= status < 300:
            body = response.body[: self.max_bytes].decode("utf-8", "replace")
            robots = Robots(RULES, now + self.ttl, body=body, status=status, fetched=now)
            logger.info("robots.txt of %s: %d bytes of rules, kept for %ss", origin, len(response.body), self.ttl)
            return robots
        if 400 <= status < 500 and status != 429:
            logger.info("robots.txt of %s answered %s: everything is allowed", origin, status)
            return Robots(ALLOW, now + self.ttl, status=status, fetched=now)
        logger.warning("robots.txt of %s answered %s: its URLs wait %ss", origin, status, self.error_retry)
        return Robots(ERROR, now + self.error_retry, status=status, error=f"HTTP {status}", fetched=now)


def robots_state(server: redis.Redis, origin: str) -> dict[str, Any] | None:
    """The stored robots.txt outcome of an origin, for `crawlhub limits show`."""
    robots = Robots.from_redis(server.hgetall(PREFIX + origin))  # type: ignore[arg-type]  # (bytes replies)
    if robots is None:
        return None
    return {"state": robots.state, "status": robots.status, "error": robots.error,
            "expires_in": round(robots.expires - time.time()), "bytes": len(robots.body)}


def known_origins(server: redis.Redis) -> list[str]:
    return sorted(k.decode()[len(PREFIX):] for k in server.scan_iter(PREFIX + "*") if not k.endswith(b":lock"))

