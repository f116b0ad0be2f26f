"""The impersonate rung: a download with a real browser's TLS ClientHello and HTTP/2 settings (curl_cffi).

Scrapy's Twisted client shows OpenSSL's ClientHello whatever the headers say, so a site that checks the
TLS fingerprint (JA3, JA4) refuses it however browser-like the header profile is. curl_cffi is libcurl
built with BoringSSL and patched to send the ClientHello, the HTTP/2 SETTINGS and the pseudo-header order
of a named browser (its ``impersonate`` targets). A request on this rung (``meta["rung"] ==
"impersonate"``, set by :class:`crawlhub.downloadermiddlewares.ladder.LadderMiddleware`) is downloaded
with it, and every other request by the handler it stands in front of (Scrapy's, or the browser's).

Coherence: the TLS target follows the request's User-Agent, which the header profile set (a Chrome profile
goes out with Chrome's ClientHello, a Firefox one with Firefox's, ``IMPERSONATE_TARGETS``); a request with
no browser User-Agent takes ``IMPERSONATE_TARGET`` with that browser's own default headers. The request's
headers go out as they are, cookies included (Scrapy's cookie middleware keeps the jar, curl keeps none),
through the request's proxy (credentials from its Proxy-Authorization header, never sent to the site), with
Scrapy's timeout; redirects are not followed here (Scrapy's redirect middleware follows them, as for any
request); a failure is raised as Scrapy's own download exceptions, so retries and ban rules treat it as any.

Every download ends: libcurl enforces the timeout, and a watchdog ends one whose await outlives twice the
timeout (at least one second more): curl_cffi's AsyncSession can wait forever with its own timeout not
firing (lexiforest/curl_cffi#578, open), which would leave the page leased and renewed by a live worker,
never stored and never dead-lettered. The watchdog raises Scrapy's DownloadTimeoutError (retried, then
dead-lettered with the reason), counts ``impersonate/stuck`` and makes a new session for what follows.

curl_cffi is imported on the first impersonated request only: a worker that never climbs never loads it.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import time
from typing import TYPE_CHECKING, Any

from scrapy.core.downloader.handlers.http11 import HTTP11DownloadHandler, TunnelError
from scrapy.exceptions import (
    CannotResolveHostError,
    DownloadConnectionRefusedError,
    DownloadFailedError,
    DownloadTimeoutError,
    ResponseDataLossError,
)
from scrapy.http import Headers, Request, Response
from scrapy.responsetypes import responsetypes

from crawlhub import meta
from crawlhub.profiles import family_of
from crawlhub.roles import IMPERSONATE, IMPERSONATE_HANDLER
from crawlhub.roles import SCRAPY_HANDLER as SCRAPY_HANDLER  # (kept here too: the add-on reads it from roles)

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

logger = logging.getLogger(__name__)

HANDLER = IMPERSONATE_HANDLER
# the rungs of the ladder, cheapest first (crawlhub.downloadermiddlewares.ladder)

# libcurl's error codes (curl/curl.h) as the exceptions Scrapy's own handler raises
_RESOLVE = {5, 6}  # could not resolve proxy, host
_REFUSED = {7}  # could not connect
_TIMEOUT = {28}
_LOST = {18, 52, 55, 56}  # partial file, empty reply, send error, receive error
_PROXY = {97}  # proxy handshake
# curl's CURL_HTTP_VERSION_* as the protocol Scrapy's responses name
_PROTOCOLS = {1: "HTTP/1.0", 2: "HTTP/1.1", 3: "h2", 4: "h2", 5: "h2", 30: "h3", 31: "h3"}
# headers curl must not be given: the proxy's credentials go to the proxy only; curl sets the connection's
_NOT_SENT = {b"proxy-authorization", b"proxy-connection", b"connection", b"content-length", b"host"}


def _error(exc: BaseException, url: str) -> Exception:
    code = int(getattr(exc, "code", 0) or 0)
    text = f"{url}: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__} (impersonate, curl error {code})"
    if code in _RESOLVE:
        return CannotResolveHostError(text)
    if code in _REFUSED:
        return DownloadConnectionRefusedError(text)
    if code in _TIMEOUT:
        return DownloadTimeoutError(text)
    if code in _LOST:
        return ResponseDataLossError(text)
    if code in _PROXY:
        return TunnelError(text)
    return DownloadFailedError(text)


def watchdog(timeout: float) -> float:
    """How long an impersonated download may take before the watchdog ends it: twice its timeout, at least 1 s
    more (libcurl's own timeout fires late under load, and ending it early would cost its session)."""
    return timeout + max(1.0, timeout)


async def _close_quietly(session: Any) -> None:
    try:
        await asyncio.wait_for(session.close(), 10.0)
    except Exception as exc:  # noqa: BLE001 - a wedged session: nothing more to do than say it
        logger.debug("A stuck curl_cffi session did not close cleanly: %r", exc)


def _proxy_auth(request: Request) -> tuple[str, str] | None:
    value = request.headers.get(b"Proxy-Authorization")
    if not value or not value.lower().startswith(b"basic "):
        return None
    user, _, password = base64.b64decode(value[6:].strip()).decode("latin-1").partition(":")
    return user, password


class Impersonator:
    """One curl_cffi session per worker (made on first use): fetches a request as a real browser would."""

    def __init__(self, crawler: Crawler) -> None:
        settings = crawler.settings
        self.crawler = crawler
        self.default = settings.get("IMPERSONATE_TARGET") or "chrome"
        self.targets: dict[str, str] = dict(settings.getdict("IMPERSONATE_TARGETS"))
        self.verify = settings.getbool("TLS_VERIFY")
        self.timeout = settings.getfloat("DOWNLOAD_TIMEOUT")
        self.maxsize = settings.getint("DOWNLOAD_MAXSIZE")
        self.clients = max(1, settings.getint("CONCURRENT_REQUESTS"))
        self.session: Any = None
        self._closing: set[asyncio.Future[None]] = set()  # sessions a watchdog replaced, closing

    def target_for(self, request: Request) -> tuple[str, bool]:
        """The curl_cffi target, and whether the request's own headers go out (else the target's defaults)."""
        chosen = request.meta.get(meta.IMPERSONATE_TARGET)
        if isinstance(chosen, str) and chosen:
            return chosen, True
        agent = (request.headers.get(b"User-Agent") or b"").decode("latin-1")
        family = family_of(agent) if agent else ""
        if family and family in self.targets:
            return self.targets[family], True
        return self.default, False

    async def fetch(self, request: Request) -> Response:
        from curl_cffi.requests import AsyncSession

        if self.session is None:
            self.session = AsyncSession(max_clients=self.clients)
        target, own_headers = self.target_for(request)
        headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, values in request.headers.items()
                   for v in values if k.lower() not in _NOT_SENT]
        if not own_headers:  # the target's own browser headers, then what the request adds (not Scrapy's agent)
            headers = [(k, v) for k, v in headers if k.lower() != "user-agent"]
        stats = self.crawler.stats
        stats.inc_value("impersonate/requests")
        stats.inc_value(f"impersonate/target/{target}")
        started = time.monotonic()
        timeout = float(request.meta.get("download_timeout") or self.timeout)
        session = self.session
        try:
            sent = session.request(
                request.method, request.url, headers=headers, data=request.body or None, impersonate=target,
                default_headers=not own_headers, allow_redirects=False, verify=self.verify, discard_cookies=True,
                timeout=timeout, proxy=request.meta.get("proxy") or None, proxy_auth=_proxy_auth(request))
            answer = await (asyncio.wait_for(sent, watchdog(timeout)) if timeout > 0 else sent)
        except TimeoutError:  # (the watchdog's: curl_cffi's own errors are not TimeoutErrors)
            raise self._stuck(session, request.url, timeout, time.monotonic() - started) from None
        except Exception as exc:  # curl_cffi's errors carry libcurl's code
            stats.inc_value("impersonate/errors")
            raise _error(exc, request.url) from exc
        request.meta["download_latency"] = time.monotonic() - started
        body = answer.content or b""
        if self.maxsize and len(body) > self.maxsize:
            raise DownloadFailedError(f"{request.url}: {len(body)} bytes, above DOWNLOAD_MAXSIZE ({self.maxsize})")
        # curl decoded the body (gzip, br, zstd): its encoding and length headers would mislead Scrapy's middlewares
        pairs = [(k, v) for k, v in answer.headers.multi_items() if k.lower() not in ("content-encoding", "content-length")]
        headers_out = Headers()
        for k, v in pairs:
            headers_out.appendlist(k, v)
        cls = responsetypes.from_args(headers=headers_out, url=request.url, body=body)
        return cls(url=request.url, status=answer.status_code, headers=headers_out, body=body, request=request,
                   flags=["impersonate"], protocol=_PROTOCOLS.get(int(answer.http_version or 0)))

    def _stuck(self, session: Any, url: str, timeout: float, waited: float) -> DownloadTimeoutError:
        """A download the watchdog ended: said, counted, and its session replaced (closed in the background)."""
        self.crawler.stats.inc_value("impersonate/stuck")
        logger.warning("%s: no answer and no timeout from curl_cffi after %.1f s (its timeout %.1f s): ended as a "
                       "timeout, which is retried; the next impersonated request opens a new session", url, waited,
                       timeout)
        if self.session is session:
            self.session = None
            self._closing.add(task := asyncio.ensure_future(_close_quietly(session)))
            task.add_done_callback(self._closing.discard)
        return DownloadTimeoutError(f"{url}: no answer after {waited:.1f} s (impersonate; curl_cffi's timeout of "
                                    f"{timeout:.1f} s did not fire)")

    async def close(self) -> None:
        if self.session is not None:
            await self.session.close()
            self.session = None
        if self._closing:  # sessions a watchdog replaced, still closing (each gives up after 10 s)
            await asyncio.wait(list(self._closing), timeout=10.0)


def impersonated(request: Request) -> bool:
    return request.meta.get(meta.DOWNLOAD_RUNG) == IMPERSONATE and not request.meta.get("playwright")


class Impersonating:
    """A download handler's mixin: requests on the impersonate rung go through curl_cffi, the rest to the handler
    it is mixed into (Scrapy's, or the browser's: crawlhub.browser_handler)."""

    impersonator: Impersonator

    async def download_request(self, request: Request) -> Response:
        if impersonated(request):
            return await self.impersonator.fetch(request)
        return await super().download_request(request)  # type: ignore[misc,no-any-return]

    async def close(self) -> None:
        await self.impersonator.close()
        await super().close()  # type: ignore[misc]


class ImpersonateDownloadHandler(Impersonating, HTTP11DownloadHandler):
    """Scrapy's HTTP/1.1 handler, with the requests on the impersonate rung downloaded by curl_cffi."""

    def __init__(self, crawler: Crawler) -> None:
        super().__init__(crawler)
        self.impersonator = Impersonator(crawler)
