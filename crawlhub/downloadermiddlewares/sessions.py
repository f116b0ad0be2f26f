"""SessionMiddleware (375) and SessionResponseMiddleware (920): sessions shared by the cluster.

A spider turns sessions on with ``use_sessions = True`` or by defining ``login`` (or SESSIONS_ENABLED). Then
every request goes out in a session (``meta["session"]``: the one the spider names, to continue it, else one
from the pool of SESSION_POOL_SIZE), with the session's cookies (from Redis: any worker continues any session),
its proxy and its header profile (so, on the impersonate rung, its TLS target). The spider's hooks::

    async def login(self, session):          # once per session, in one worker of the cluster
        form = await session.get("https://example.org/login")
        page = await session.submit(form, formdata={"user": os.environ["SITE_USER"],
                                                    "password": os.environ["SITE_PASSWORD"]})
        return "Log out" in page.text         # False (or an exception): the login failed

    def session_expired(self, response):      # the site ended the session: log in again, fetch the page again
        return response.url.endswith("/login")  # (every raw answer: a redirect's too, which has no text)

A session ends (another takes its place) after SESSION_MAX_AGE seconds or SESSION_MAX_USES requests, and at
the first banned answer (SESSION_BAN_CODES, the ban markers, the spider's ``is_blocked``), as Crawlee's
SessionPool retires one. The shared state and its consistency: :mod:`crawlhub.sessions`.

``session_expired`` (and ``is_blocked``) see every raw answer of a session, a redirect among them (a 3xx to the
login form is the usual sign of an ended session): a redirect has no text to read, so read ``response.url``,
``response.status`` or ``response.headers`` first. An error in a hook is the spider's (crawlhub._utils.hooks):
logged with its traceback and the hook's name, and the page goes to the dead-letter list saying so.

Two middlewares, as for the ladder: the session is chosen before the proxy (380) and the header profile (395)
that it binds, and every raw answer is seen first (920: before the ladder, the proxy's ban rules, redirects and
retries), so cookies a redirect or a block sets are kept and a banned session ends before the page goes again.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import random
import time
from typing import TYPE_CHECKING, Any

from form2request import form2request
from scrapy.crawler import Crawler
from scrapy.exceptions import IgnoreRequest, NotConfigured
from scrapy.http import Request, Response
from scrapy.http.cookies import CookieJar
from scrapy.http.request import NO_CALLBACK
from scrapy.utils.misc import load_object

from crawlhub import intent, meta
from crawlhub._utils.errors import failure_text
from crawlhub._utils.hooks import SpiderHookError, call_hook, end_page, hook_failed
from crawlhub.components import FrontierMiddleware
from crawlhub.connection import REDIS_ERRORS, worker_id
from crawlhub.frontier.scripts import Script
from crawlhub.proxies import ban_markers, block_reason
from crawlhub.roles import RUNGS
from crawlhub.sessions import (
    LOGIN,
    READY,
    SCRIPT,
    SessionKeys,
    SessionState,
    fill_jar,
    jar_snapshot,
)

if TYPE_CHECKING:
    import redis
    from typing_extensions import Self

logger = logging.getLogger(__name__)

# what Scrapy's redirect middleware adds to a redirected request's meta (gone when the page is asked again)
REDIRECT_META = ("redirect_urls", "redirect_reasons", "redirect_times", "redirect_ttl")


def sessions_wanted(crawler: Crawler) -> bool:
    """Whether the crawl's spider goes out in sessions (SESSIONS_ENABLED, ``use_sessions``, a ``login`` hook)."""
    spidercls = getattr(crawler, "spidercls", None)
    return bool(crawler.settings.getbool("SESSIONS_ENABLED") or getattr(spidercls, "use_sessions", False)
                or callable(getattr(spidercls, "login", None)))


class LoginFailed(Exception):
    """A session's login did not work (the message says why)."""


class Session:
    """What a spider's ``login(session)`` gets: downloads in this session (its cookies, proxy and profile)."""

    def __init__(self, pool: SessionPool, state: SessionState) -> None:
        self.pool, self.id = pool, state.id
        self.proxy, self.profile = state.proxy, state.profile
        self.rung = ""  # the ladder's rung the last download went out on (the next starts there)

    async def fetch(self, request: Request) -> Response:
        """Download ``request`` in this session (through every downloader middleware, not the spider's). A
        download goes on the rung the one before it ended on: a login form fetched again on the impersonate rung
        is submitted there, not blocked on plain first."""
        extra: dict[str, Any] = {meta.SESSION: self.id, meta.SESSION_LOGIN: True}
        if self.rung in RUNGS[1:] and meta.CLIMBED not in request.meta:
            extra[meta.CLIMBED] = RUNGS[RUNGS.index(self.rung) - 1]
        request = request.replace(dont_filter=True, meta={**request.meta, **extra})
        engine = self.pool.crawler.engine
        assert engine is not None  # (a login runs inside a crawl)
        response = await engine.download_async(request)
        self.rung = str(response.meta.get(meta.DOWNLOAD_RUNG) or self.rung)
        return response

    async def get(self, url: str, **kwargs: Any) -> Response:
        return await self.fetch(Request(url, **kwargs))

    async def submit(self, response: Response, formdata: dict[str, str] | None = None, form: str = "form",
                     **kwargs: Any) -> Response:
        """Submit the first form ``form`` (a CSS selector) of ``response`` matches, with ``formdata`` over its
        fields (form2request, as Scrapy advises: its hidden fields, a CSRF token among them, go too)."""
        found = response.css(form)
        if not found:
            raise LoginFailed(f"no form {form!r} in {response.url} (HTTP {response.status})")
        data = form2request(found[0], formdata)
        return await self.fetch(data.to_scrapy(callback=NO_CALLBACK, **kwargs))

    def clear_cookies(self) -> None:
        """Forget the session's cookies (for every worker)."""
        self.pool.clear_cookies(self.id)


class SessionPool:
    """A worker's side of the cluster's sessions: the script's calls, and its copies of the pool and the jars.

    Copies and how each learns a change: the list of live sessions is read again every SESSION_REFRESH seconds
    (and while the pool is not full); a session's cookies are read again when its version, which each request's
    use returns, differs from the copy's.
    """

    def __init__(self, owner: FrontierMiddleware, spider: str) -> None:
        self.owner, self.crawler = owner, owner.crawler
        s = self.crawler.settings
        self.keys = SessionKeys.of(spider)
        self.size = max(1, s.getint("SESSION_POOL_SIZE"))
        self.max_age = s.getfloat("SESSION_MAX_AGE")
        self.max_uses = s.getint("SESSION_MAX_USES")
        self.timeout = s.getfloat("SESSION_LOGIN_TIMEOUT")
        self.refresh = s.getfloat("SESSION_REFRESH")
        self.cookie_ttl = int(self.max_age) + 3600 if self.max_age > 0 else 0
        self.worker = worker_id()
        self.script: Script | None = None
        self.live: dict[str, SessionState] = {}
        self.loaded, self.full = float("-inf"), False
        self.jars: dict[str, tuple[int, CookieJar]] = {}  # session id -> (version, jar)
        self.rng = random.Random()
        # what a login's downloads raise that is no mistake of the spider's: no form found, a download that failed
        self.site_errors: tuple[type[BaseException], ...] = (
            LoginFailed, IgnoreRequest,
            *(load_object(e) if isinstance(e, str) else e for e in s.getlist("RETRY_EXCEPTIONS")))

    # -- the script ------------------------------------------------------------------------------------
    @property
    def server(self) -> redis.Redis | None:
        return self.owner.server

    def call(self, op: str, session_id: str | None, *args: Any) -> Any:
        server = self.server
        if server is None:
            raise RuntimeError("sessions need crawlhub's shared frontier (SCHEDULER)")
        if self.script is None or self.script.server is not server:
            self.script = Script(server, SCRIPT)
        keys = [self.keys.pool, self.keys.stats, self.keys.cookies(session_id or "-")]
        return self.script(keys, [op, f"{time.time():.3f}", *(() if session_id is None else (session_id,)), *args])

    # -- choosing ------------------------------------------------------------------------------------------
    def pick(self, proposal: tuple[str, str], has_login: bool) -> str:
        """A session id for a request with none: a new one while the pool is not full, else a ready one."""
        if not self.full or time.monotonic() - self.loaded >= self.refresh:
            created, live = self.call("pool", None, self.size, self.max_age, self.max_uses,
                                      LOGIN if has_login else READY, *proposal)
            self.live = {s.id: s for s in map(SessionState.from_json, live)}
            self.loaded, self.full = time.monotonic(), len(self.live) >= self.size
            for gone in set(self.jars) - set(self.live):
                self.jars.pop(gone, None)
            if created:
                self.crawler.stats.inc_value("sessions/created")
                return created.decode() if isinstance(created, bytes) else str(created)
        ready = [sid for sid, s in self.live.items() if s.state == READY]
        return self.rng.choice(ready or list(self.live))

    def use(self, session_id: str, count: bool = True) -> SessionState | None:
        """The session as the cluster has it (its use counted), its cookies read again if they changed; None: it
        ended."""
        known = self.jars.get(session_id, (-1, None))[0]
        raw, cookies = self.call("use", session_id, known, self.max_age, self.max_uses, "1" if count else "0")
        if not raw:
            self.forget(session_id)
            return None
        state = SessionState.from_json(raw)
        self.live[session_id] = state
        if cookies is not None:
            jar = CookieJar()
            fill_jar(jar.jar, dict(zip(cookies[::2], cookies[1::2], strict=True)))
            self.jars[session_id] = (state.ver, jar)
        return state

    def forget(self, session_id: str) -> None:
        self.live.pop(session_id, None)
        self.jars.pop(session_id, None)
        self.full = False

    def jar(self, session_id: str) -> CookieJar:
        return self.jars.setdefault(session_id, (-1, CookieJar()))[1]

    # -- cookies ---------------------------------------------------------------------------------------------
    def store_cookies(self, session_id: str, request: Request, response: Response) -> None:
        """The answer's cookies, into the session's jar here and in Redis (before the callback sees the answer)."""
        if b"Set-Cookie" not in response.headers:
            return  # (most answers: nothing to compare, nothing to write)
        ver, jar = self.jars.setdefault(session_id, (-1, CookieJar()))
        before = jar_snapshot(jar.jar)
        jar.extract_cookies(response, request)
        jar.jar.clear_expired_cookies()
        after = jar_snapshot(jar.jar)
        sets = {k: v for k, v in after.items() if before.get(k) != v}
        dels = [k for k in before if k not in after]
        if sets or dels:
            self._write(session_id, ver, sets, dels)

    def clear_cookies(self, session_id: str) -> None:
        ver, jar = self.jars.setdefault(session_id, (-1, CookieJar()))
        dels = list(jar_snapshot(jar.jar))
        jar.jar.clear()
        if dels:
            self._write(session_id, ver, {}, dels)

    def _write(self, session_id: str, ver: int, sets: dict[str, str], dels: list[str]) -> None:
        new = int(self.call("cookies", session_id, json.dumps(sets), json.dumps(dels) if dels else "[]",
                            self.cookie_ttl))
        jar = self.jars[session_id][1]
        # the copy is the cluster's if nobody else wrote in between; else it is read again with the next use
        self.jars[session_id] = (new if new == ver + 1 else -1, jar)

    # -- logins ----------------------------------------------------------------------------------------------
    async def ready(self, state: SessionState, login: Any, url: str = "") -> tuple[SessionState | None, str]:
        """The session logged in (this worker logs it in, or waits for the worker that does); (None, why): the
        login failed or the session ended. ``url``: the page that waits for it."""
        waited = False
        while state.state != READY:
            raw, claimed = self.call("claim", state.id, self.worker, self.timeout)
            if int(claimed):
                return await self._login(SessionState.from_json(raw), login, url)
            if not waited:
                waited = True
                self.crawler.stats.inc_value("sessions/waited_for_login")
            await asyncio.sleep(0.2)  # (another worker logs it in: its lock ends by SESSION_LOGIN_TIMEOUT)
            again = self.use(state.id, count=False)
            if again is None:
                return None, f"session {state.id} ended while another worker logged it in"
            state = again
        return state, ""

    async def _login(self, state: SessionState, login: Any, url: str) -> tuple[SessionState | None, str]:
        stats = self.crawler.stats
        why = ""
        try:
            if login is None:  # no login hook: a session the site expired starts again with no cookies
                self.clear_cookies(state.id)
                ok = True
            else:
                result = login(Session(self, state))
                if inspect.isawaitable(result):
                    result = await asyncio.wait_for(result, self.timeout)
                ok = result is not False
                why = "the spider's login returned False" if not ok else ""
        except asyncio.TimeoutError:
            ok, why = False, f"the spider's login took longer than SESSION_LOGIN_TIMEOUT ({self.timeout:g}s)"
        except self.site_errors as exc:  # the site's answer (no form) or the network's: said, not a spider's error
            ok, why = False, failure_text(exc, 300)
        except Exception as exc:  # noqa: BLE001 - a mistake in the spider's login: its error, the session's end
            ok, why = False, str(hook_failed(self.crawler.spider, "login", exc, url))[:300]
        raw, failing = self.call("logged", state.id, self.worker, "1" if ok else "0", why)
        if ok and raw:
            stats.inc_value("sessions/logins")
            logger.info("Session %s logged in (login %d of it)", state.id, state.logins + 1)
            done = self.live[state.id] = SessionState.from_json(raw)  # (ready: this worker picks it from now on)
            return done, ""
        self.forget(state.id)
        stats.inc_value("sessions/login_failures")
        logger.warning("Session %s: the login failed (%s); the session ends (%s failed in a row)", state.id,
                       why or "it was taken over", failing)
        return None, f"login failed: {why}"

    def failing(self) -> tuple[int, float, str]:
        """Failed logins in a row across the cluster, when the last one failed (time.time()), and the last
        session's end (its reason)."""
        server = self.server
        if server is None:
            return 0, 0.0, ""
        failing, at, why = server.hmget(self.keys.stats, ["failing", "failed_at", "why"])
        return int(failing or 0), float(at or 0), why.decode() if isinstance(why, bytes) else str(why or "")

    def logins_failing(self, most: int) -> str:
        """Why no login is to be tried now ('': try): ``most`` failed in a row, the last one less than
        SESSION_LOGIN_TIMEOUT ago (after that one worker's request tries again: the site may be fixed)."""
        failing, at, why = self.failing()
        if failing >= most and time.time() - at < self.timeout:
            return f"{failing} logins failed in a row, the last {time.time() - at:.0f} s ago ({why})"
        return ""


class SessionComponent(FrontierMiddleware):
    """Either side of the sessions: on for a spider that has them (:func:`sessions_wanted`)."""

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        if not sessions_wanted(crawler):
            raise NotConfigured  # (no login, no use_sessions: nothing to do, and nothing to warn about)
        return cls(crawler)


class SessionMiddleware(SessionComponent):
    """Each request goes out in a session: its cookies, its proxy, its profile (order 375)."""

    def __init__(self, crawler: Crawler) -> None:
        super().__init__(crawler)
        s = crawler.settings
        self.max_failing = max(1, s.getint("SESSION_LOGIN_FAILURES"))
        self.profiles = s.getbool("HEADER_PROFILES_ENABLED")
        self._pool: SessionPool | None = None

    @property
    def pool(self) -> SessionPool:
        if self._pool is None:
            spider = self.crawler.spider
            assert spider is not None  # (requests come from an open spider)
            self._pool = SessionPool(self, spider.name)
        return self._pool

    def _proposal(self, request: Request) -> tuple[str, str]:
        """The proxy and the header profiles a new session would be bound to (ids one a line: the first that no
        live session has is taken, where the profile rotates)."""
        from crawlhub.downloadermiddlewares.headers import HeaderProfileMiddleware
        from crawlhub.downloadermiddlewares.proxy import ProxyMiddleware

        proxy = profile = ""
        picker = self.crawler.get_downloader_middleware(ProxyMiddleware)
        if picker is not None and not request.meta.get("dont_proxy"):
            chosen = picker.choose(request)
            proxy = chosen.id if chosen is not None else ""
        profiles = self.crawler.get_downloader_middleware(HeaderProfileMiddleware) if self.profiles else None
        if profiles is not None:
            profile = "\n".join(p.id for p in profiles.candidates_for(request))
        return proxy, profile

    async def process_request(self, request: Request) -> Request | Response | None:
        m = request.meta
        if m.get(meta.NO_SESSION) or self.server is None:
            return None
        pool = self.pool
        if m.get(meta.SESSION_LOGIN):  # a login's own download: the session as this worker has it
            self._apply(request, pool.live.get(str(m[meta.SESSION])))
            return None
        login = getattr(self.crawler.spider, "login", None)
        why = ""
        try:
            for _ in range(4):
                sid = m.get(meta.SESSION)
                if sid is None:
                    sid = pool.pick(self._proposal(request), login is not None)
                state = pool.use(str(sid))
                if state is not None and state.state != READY:
                    stop = pool.logins_failing(self.max_failing)
                    if stop:
                        why = f"login failed: {stop}"
                        break
                    state, why = await pool.ready(state, login, request.url)
                if state is not None:
                    self._apply(request, state)
                    return None
                if m.pop(meta.SESSION, None) is not None:
                    logger.debug("%s: its session %s ended; taking another", request.url, sid)
                    self.crawler.stats.inc_value("sessions/reassigned")
                failing = pool.failing()[0] if why else 0
                if failing >= self.max_failing:
                    why = f"{why} ({failing} failed in a row)"
                    break
        except REDIS_ERRORS as exc:
            why = f"Redis unavailable ({exc}): no session to go out in"
        reason = why or "no session could be had"
        logger.warning("%s: %s; the page goes back to the frontier as a retry", request.url, reason)
        if intent.leased(request):
            return intent.retry(request, f"session: {reason}")
        raise IgnoreRequest(f"session: {reason}")

    def _apply(self, request: Request, state: SessionState | None) -> None:
        m = request.meta
        m["dont_merge_cookies"] = True  # the session's jar, not Scrapy's per-worker one
        request.headers.pop(b"Cookie", None)
        if state is None:
            return
        m[meta.SESSION] = state.id
        if not (m.get("redirect_urls") and meta.SESSION_GEN in m):
            # a redirect's hop keeps the generation its page went out in: a site that ended the session sends the
            # page to its login form, and that form shows the old generation ended, not the one logged in since
            m[meta.SESSION_GEN] = state.gen
        if state.proxy:
            m[meta.SESSION_PROXY] = state.proxy
        if state.profile and m.get(meta.HEADER_PROFILE) in (None, m.get(meta.SESSION_PROFILE)):
            # (the spider's own choice stays; one a session set before, on a retry now in another, is replaced)
            m[meta.HEADER_PROFILE] = m[meta.SESSION_PROFILE] = state.profile
        jar = self.pool.jar(state.id)
        if len(jar.jar):
            jar.add_cookie_header(request)
        self.crawler.stats.inc_value("sessions/requests")


class SessionResponseMiddleware(SessionComponent):
    """Every raw answer of a session's request: its cookies into the session; a ban ends the session; an
    expired session logs in again and the page goes again (order 920)."""

    def __init__(self, crawler: Crawler) -> None:
        super().__init__(crawler)
        s = crawler.settings
        self.codes = {int(c) for c in s.getlist("SESSION_BAN_CODES")}
        self.max_relogins = max(1, s.getint("SESSION_MAX_RELOGINS"))
        self.markers: list[str] | None = None
        self._requests: SessionMiddleware | None = None

    @property
    def pool(self) -> SessionPool | None:
        if self._requests is None:
            self._requests = self.crawler.get_downloader_middleware(SessionMiddleware)
        return self._requests.pool if self._requests is not None else None

    def banned(self, response: Response) -> str:
        if self.markers is None:
            self.markers = ban_markers(self.crawler.settings, self.crawler.spider)
        return block_reason(response, self.codes, self.markers, self.crawler.spider)

    def process_response(self, request: Request, response: Response) -> Request | Response:
        m = request.meta
        sid, pool = m.get(meta.SESSION), self.pool
        if sid is None or pool is None or m.get(meta.NO_SESSION) or self.server is None:
            return response
        sid = str(sid)
        stats = self.crawler.stats
        try:
            pool.store_cookies(sid, request, response)
            if m.get(meta.SESSION_LOGIN):
                return response
            why = self.banned(response)
            if why and self._ladder_climbs(request, response):
                # the ladder fetches it again a rung higher, in this session: how the client opened TLS was refused,
                # not the session (the blocks climb the domain; on the top rung a block ends the session)
                stats.inc_value("sessions/blocked_below_top_rung")
            elif why:
                pool.call("retire", sid, f"{why} at {request.url}"[:300], "ban")
                pool.forget(sid)
                stats.inc_value("sessions/banned")
                logger.info("Session %s ends: %s at %s", sid, why, request.url)
                return response  # (the ladder, the proxy's rules, the retries go on with it; in another session)
            expired = self._expired(response)
            if not expired:
                return response
            raw, flipped = pool.call("expire", sid, str(m.get(meta.SESSION_GEN, "")))
        except SpiderHookError as exc:  # a mistake in the spider's is_blocked or session_expired: the page ends
            return end_page(request, exc, status=response.status)
        except REDIS_ERRORS as exc:
            logger.warning("Redis unavailable (%s): session %s of %s not updated", exc, sid, request.url)
            return response
        if int(flipped):
            stats.inc_value("sessions/expired")
            logger.info("Session %s expired (%s at %s): it logs in again", sid, expired, request.url)
        if raw:
            pool.live[sid] = SessionState.from_json(raw)
        done = int(m.get(meta.RELOGINS, 0))
        if done >= self.max_relogins:
            reason = (f"its session expired {done + 1} times in a row, each time right after a login ({expired}):"
                      " does the spider's login work?")
            logger.warning("%s: %s", request.url, reason)
            if intent.leased(request):
                return intent.retry(request, f"session: {reason}", status=response.status)
            raise IgnoreRequest(f"session: {reason}")
        # the page itself again (a redirect to the login form is not the page): the first URL of its redirects
        first = (m.get("redirect_urls") or [request.url])[0]
        kept = {k: v for k, v in m.items() if k not in (meta.SESSION_GEN, "dont_merge_cookies", *REDIRECT_META)}
        kept.update({meta.RELOGINS: done + 1, meta.SAME_PAGE: request.url})  # (it replaces this hop's lease)
        again = request.replace(url=first, dont_filter=True, meta=kept)
        if first != request.url and request.method != "GET":
            again = again.replace(method="GET", body=b"")
        return again

    def _ladder_climbs(self, request: Request, response: Response) -> bool:
        """Whether the ladder (LadderBlockMiddleware, next in line) fetches this answer's page again a rung up."""
        from crawlhub.downloadermiddlewares.ladder import LadderBlockMiddleware, climbs

        ladder = self.crawler.get_downloader_middleware(LadderBlockMiddleware)
        return ladder is not None and climbs(ladder, request, response)

    def _expired(self, response: Response) -> str:
        spider = self.crawler.spider
        if getattr(spider, "session_expired", None) is None:
            return ""
        verdict = call_hook(spider, "session_expired", response, url=response.url)
        if not verdict:
            return ""
        return verdict if isinstance(verdict, str) else "the spider's session_expired"

