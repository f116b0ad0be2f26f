"""``crawlhub ui``: a small web app that shows a crawl live and steers it (pause, resume, requeue).

Built on aiohttp's server (``aiohttp.web``): Scrapy already depends on aiohttp, so the UI adds no
package, and aiohttp serves server-sent events (the page's live updates) from its own production
server, with no WSGI bridge or second server to run. The app reads Redis and MongoDB through the
same functions as ``crawlhub status`` (crawlhub.monitor), off the event loop (redis-py and pymongo
block), and never runs a crawl. Everything the page loads comes from this server: no CDN.

Security: on a loopback address it answers only requests whose ``Host`` is loopback (a web page
elsewhere cannot reach it through DNS rebinding); bound elsewhere it needs ``CRAWLHUB_UI_TOKEN``,
and every page and API request without that token gets 401. Requests that change something are
POSTs carrying ``X-Crawlhub: 1``, which a cross-site form cannot send. The token never reaches a
log: the access log leaves out query strings. The API: docs/cli.md ("crawlhub ui").
"""

from __future__ import annotations

import asyncio
import hmac
import ipaddress
import json
import logging
import math
import socket
import threading
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import Future, ThreadPoolExecutor
from importlib import resources
from typing import Any

import redis
from aiohttp import web
from aiohttp.abc import AbstractAccessLogger
from pymongo import MongoClient
from scrapy.settings import BaseSettings, Settings

from crawlhub.addon import known_spiders
from crawlhub.frontier import control
from crawlhub.frontier.keys import Keys
from crawlhub.frontier.partitions import frontier_keys
from crawlhub.monitor import quarantine
from crawlhub.monitor.auditlog import read_log
from crawlhub.monitor.report import chart_parts, report_series
from crawlhub.monitor.status import cluster_status, has_frontier, item_counts, worker_rows

logger = logging.getLogger(__name__)

COOKIE = "crawlhub_ui_token"
STATIC = ("index.html", "app.js", "style.css")
TYPES = {"html": "text/html", "js": "text/javascript", "css": "text/css"}
LOOPBACK_NAMES = ("localhost",)
CSP = ("default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; connect-src 'self'; "
       "frame-ancestors 'none'; base-uri 'none'; form-action 'none'")


def is_loopback(host: str) -> bool:
    """Whether ``host`` (an address or a name, without its port) is this machine's loopback."""
    host = host.strip("[]").lower()
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def finite(value: Any) -> Any:
    """``value`` with infinite floats (a latency past the last histogram bucket) as the text "inf": JSON has none."""
    if isinstance(value, float) and not math.isfinite(value):
        return "inf"
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [finite(v) for v in value]
    return value


class Dashboard:
    """What the UI reads and does, over one Redis client and one MongoDB client (blocking calls: run them
    in threads). A spider's status is read at most once per ``interval`` whatever the number of pages open."""

    def __init__(self, settings: Settings, server: redis.Redis, mongo: MongoClient[Any] | None, interval: float = 2.0,
                 log_lines: int = 30) -> None:
        self.settings, self.server, self.mongo = settings, server, mongo
        self.interval, self.log_lines = interval, log_lines
        self.items_every = max(5.0, 2 * interval)
        self._cache: dict[tuple[str, str], tuple[float, Any]] = {}
        self._spiders: list[str] | None = None
        # each spider's settings as its workers have them (its redis_key...): read once, spiders are code
        self._own: dict[str, Any] = {}
        self._lock = threading.Lock()
        self._items: dict[str, tuple[float, dict[str, Any]]] = {}
        self._counting: dict[str, Future[Any]] = {}
        self._pool = ThreadPoolExecutor(2, thread_name_prefix="crawlhub-ui-items")

    def cached(self, kind: str, spider: str, ttl: float, read: Callable[[], Any]) -> Any:
        now = time.monotonic()
        at, value = self._cache.get((kind, spider), (float("-inf"), None))
        if now - at >= ttl:
            value = read()
            self._cache[(kind, spider)] = (now, value)
        return value

    def keys(self, spider: str) -> Keys:
        return frontier_keys(self.server, self.settings_for(spider), spider)

    def settings_for(self, spider: str) -> BaseSettings:
        if spider not in self._own:
            from crawlhub.addon import spider_settings

            self._own[spider] = spider_settings(self.settings, spider)
        own: BaseSettings = self._own[spider]
        return own

    def known(self) -> list[str]:
        if self._spiders is None:

            self._spiders = known_spiders(self.settings)
        return self._spiders

    def spiders(self) -> list[dict[str, Any]]:
        rows = []
        now = time.time()
        dead_after = self.settings.getfloat("WORKER_DEAD_AFTER") or 3 * self.settings.getfloat("WORKER_HEARTBEAT_INTERVAL")
        for name in self.known():
            active = has_frontier(self.server, self.settings_for(name), name)
            workers = worker_rows(self.server.hgetall(self.keys(name).workers), now, dead_after) if active else []
            rows.append({"spider": name, "has_frontier": active,
                         "paused": bool(active and self.server.exists(self.keys(name).paused)),
                         "workers_alive": sum(w["alive"] for w in workers),
                         "last_beat": max((w.get("last_beat", 0) for w in workers), default=None)})
        return rows

    @staticmethod
    def default_spider(rows: list[dict[str, Any]]) -> str | None:
        """The spider the page opens on: the one with live workers, else the one whose workers were last heard,
        else one with a crawl, else the first."""
        if not rows:
            return None
        best = max(rows, key=lambda r: (r["workers_alive"] > 0, r["last_beat"] or 0, r["has_frontier"]))
        return str(best["spider"])

    def status(self, spider: str) -> dict[str, Any]:
        """What `crawlhub status --json` shows, with the last audit-log lines and the stored total, as JSON
        can hold it. Redis is read every time (cached for an interval); MongoDB's counts, slower on a large
        store, in a thread of their own every ``items_every`` seconds: a slow count never holds the page's
        updates back."""
        shown: dict[str, Any] = finite(self._status(spider))
        return shown

    def _status(self, spider: str) -> dict[str, Any]:
        def read() -> dict[str, Any]:
            data = cluster_status(self.server, self.settings_for(spider), spider, with_items=False)
            data["log"], _ = read_log(self.server, spider, self.log_lines)
            data["items"] = self.items(spider, data["totals"].get("items", 0))
            data["stored"] = sum((data["items"] or {}).get("stored", {}).values())
            return data

        status: dict[str, Any] = self.cached("status", spider, self.interval * 0.9, read)
        return status

    def items(self, spider: str, scraped: int) -> dict[str, Any]:
        """The spider's item counts as last read (``{"pending": true}`` until the first read is done)."""
        with self._lock:
            at, value = self._items.get(spider, (float("-inf"), {"pending": True}))
            running = self._counting.get(spider)
            if (running is None or running.done()) and time.monotonic() - at >= self.items_every:
                running = self._counting[spider] = self._pool.submit(self._count, spider, scraped)
        if "pending" in value:
            try:  # the first read: a moment's wait saves a page that says "counting" on a small store
                return running.result(timeout=1.0) if running else value
            except Exception:
                return value
        return value

    def _count(self, spider: str, scraped: int) -> dict[str, Any]:
        value = item_counts(self.settings, spider, scraped, self.mongo)
        with self._lock:
            self._items[spider] = (time.monotonic(), value)
        return value

    def charts(self, spider: str) -> dict[str, Any]:
        """The charts (SVG): the whole crawl in at most 120 points, re-read at most every 5 s."""
        def read() -> dict[str, Any]:
            parts = chart_parts(self._status(spider), report_series(self.server, spider))
            return {name: parts[name] for name in ("pages", "codes", "latency", "items")} | {"per": parts["per"]}

        charts: dict[str, Any] = self.cached("charts", spider, max(5.0, self.interval), read)
        return charts

    def pause(self, spider: str) -> dict[str, Any]:
        control.pause(self.server, self.keys(spider))
        self._cache.pop(("status", spider), None)
        return {"spider": spider, "paused": True}

    def resume(self, spider: str) -> dict[str, Any]:
        was = control.resume(self.server, self.keys(spider))
        self._cache.pop(("status", spider), None)
        return {"spider": spider, "paused": False, "was_paused": was}

    def dead_letters(self, spider: str, limit: int = 200) -> dict[str, Any]:
        letters = control.dead_letters(self.server, self.keys(spider))
        rows = [{"id": control.entry_id(raw), "url": letter.url, "attempts": letter.attempts, "status": letter.status,
                 "error": letter.error, "last_attempt": letter.last_attempt} for raw, letter in letters[:limit]]
        return {"spider": spider, "total": len(letters), "entries": rows}

    def requeue_dead_letters(self, spider: str, ids: list[str] | None) -> dict[str, Any]:
        keys = self.keys(spider)
        done = []
        for raw, letter in control.dead_letters(self.server, keys):
            if ids is None or control.entry_id(raw) in ids:
                control.requeue_dead_letter(self.server, keys, raw, letter)
                done.append(letter.url)
        logger.info("crawlhub ui: %d dead letter(s) of %s requeued", len(done), spider)
        return {"spider": spider, "requeued": len(done), "urls": done}

    def quarantined(self, spider: str, limit: int = 200) -> dict[str, Any]:
        """The spider's quarantine (crawlhub.monitor.quarantine.summary) as the page's lists have it: ``entries``."""
        data = quarantine.summary(self._quarantine(), spider, limit=limit)
        data["entries"] = [{"id": r["_id"], "page": r.get("source_url"), "item_type": r.get("item_type"),
                            "reasons": r.get("reasons") or [], "at": r.get("quarantined_at"),
                            "requeueable": bool(r.get("request"))} for r in data.pop("records")]
        return data

    def requeue_quarantined(self, spider: str, ids: list[str] | None) -> dict[str, Any]:
        done = quarantine.requeue(self._quarantine(), self.server, self.keys(spider), spider, ids=ids or (),
                                  everything=ids is None)
        logger.info("crawlhub ui: %d page(s) of %s queued again for %d quarantined item(s)", len(done.pages), spider,
                    done.items)
        return {"spider": spider, "requeued": done.items, "pages": done.pages, "kept": done.kept, "missing": done.missing}

    def _quarantine(self) -> Any:
        if self.mongo is None:
            raise LookupError("MongoDB is not configured for the UI")
        return self.mongo[self.settings.get("MONGO_DATABASE")][self.settings.get("MONGO_QUARANTINE_COLLECTION")]

    def bad_seeds(self, spider: str, limit: int = 200) -> dict[str, Any]:
        found = control.bad_seeds(self.server, self.keys(spider))
        rows = [{"id": control.entry_id(raw), "seed": record.get("seed", ""), "reason": record.get("reason", ""),
                 "at": record.get("at"), "worker": record.get("worker")} for raw, record in found[:limit]]
        return {"spider": spider, "total": len(found), "entries": rows}

    def requeue_bad_seeds(self, spider: str, ids: list[str] | None) -> dict[str, Any]:
        keys = self.keys(spider)
        done = [record["seed"] for raw, record in control.bad_seeds(self.server, keys)
                if (ids is None or control.entry_id(raw) in ids) and control.requeue_bad_seed(self.server, keys, raw)]
        logger.info("crawlhub ui: %d bad seed(s) of %s pushed back to %s", len(done), spider, keys.seeds)
        return {"spider": spider, "requeued": len(done), "seeds": done}


class AccessLogger(AbstractAccessLogger):
    """One line per request, without the query string (it may hold the token)."""

    def log(self, request: web.BaseRequest, response: web.StreamResponse, time: float) -> None:  # noqa: A002 - aiohttp's signature
        self.logger.info("%s %s %s %d %.0fms", request.remote, request.method, request.path, response.status,
                         time * 1000)


def make_app(dashboard: Dashboard, token: str | None) -> web.Application:
    """The aiohttp application: the page, its static files, the JSON API and the event stream."""

    def given_token(request: web.Request) -> str:
        header = request.headers.get("Authorization", "")
        if header.lower().startswith("bearer "):
            return header[7:].strip()
        return request.query.get("token") or request.cookies.get(COOKIE, "")

    @web.middleware
    async def guard(request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> web.StreamResponse:
        if token:
            if not hmac.compare_digest(given_token(request).encode(), token.encode()):
                raise web.HTTPUnauthorized(
                    text="401: this crawlhub ui needs its token (CRAWLHUB_UI_TOKEN): open /?token=<the token>, "
                         "or send 'Authorization: Bearer <the token>'\n",
                    headers={"WWW-Authenticate": 'Bearer realm="crawlhub"'})
        elif not is_loopback(request.url.host or ""):
            raise web.HTTPMisdirectedRequest(text=f"421: this crawlhub ui answers on a loopback name only, "
                                                  f"not {request.host!r}\n")
        if request.method == "POST" and request.headers.get("X-Crawlhub") != "1":
            raise web.HTTPForbidden(text="403: a change needs the header 'X-Crawlhub: 1' (cross-site requests are refused)\n")
        response = await handler(request)
        if not response.prepared:
            response.headers.setdefault("Content-Security-Policy", CSP)
            response.headers.setdefault("X-Content-Type-Options", "nosniff")
            response.headers.setdefault("Referrer-Policy", "no-referrer")
            response.headers.setdefault("Cache-Control", "no-store")
        return response

    async def run(fn: Callable[..., Any], *args: Any) -> Any:
        try:
            return await asyncio.to_thread(fn, *args)
        except Exception as exc:  # Redis or MongoDB down, a bad record: said to the page, the server goes on
            logger.warning("crawlhub ui: %s failed: %s: %s", getattr(fn, "__name__", fn), type(exc).__name__, exc)
            raise web.HTTPServiceUnavailable(text=json.dumps({"error": f"{type(exc).__name__}: {exc}"[:500]}),
                                             content_type="application/json") from None

    def spider_of(request: web.Request) -> str:
        spider = request.match_info["spider"]
        if spider not in dashboard.known():
            raise web.HTTPNotFound(text=json.dumps({"error": f"unknown spider {spider!r}", "spiders": dashboard.known()}),
                                   content_type="application/json")
        return spider

    async def page(request: web.Request) -> web.Response:
        # the first state comes with the page (a JSON block the script renders at once, then updates live): a
        # page looked at before its event stream answers (a screenshot, a slow link) shows the crawl, not dashes
        try:
            rows = await asyncio.to_thread(dashboard.spiders)
            first = Dashboard.default_spider(rows)
            initial = {"spiders": rows, "interval": dashboard.interval, "default": first,
                       "status": await asyncio.to_thread(dashboard.status, first) if first else None}
        except Exception as exc:  # Redis down: the page still loads and says so
            initial = {"error": f"{type(exc).__name__}: {exc}"[:500]}
        block = json.dumps(initial).replace("<", "\\u003c")
        body = resources.files("crawlhub.ui").joinpath("static", "index.html").read_text(encoding="utf-8")
        body = body.replace("</body>", f'<script id="initial" type="application/json">{block}</script>\n</body>', 1)
        response = web.Response(text=body, content_type="text/html", charset="utf-8")
        if token and request.query.get("token"):
            # the page's own requests (fetch, EventSource) carry it from now on; its script takes it out of the
            # address bar and the history entry at once (history.replaceState), the access log never shows it
            response.set_cookie(COOKIE, token, httponly=True, samesite="Strict", path="/")
        return response

    def static_file(name: str) -> web.Response:
        body = resources.files("crawlhub.ui").joinpath("static", name).read_bytes()
        return web.Response(body=body, content_type=TYPES[name.rsplit(".", 1)[1]], charset="utf-8")

    async def asset(request: web.Request) -> web.Response:
        name = request.match_info["name"]
        if name not in STATIC:
            raise web.HTTPNotFound()
        return static_file(name)

    async def spiders(request: web.Request) -> web.Response:
        rows = await run(dashboard.spiders)
        return web.json_response({"spiders": rows, "interval": dashboard.interval,
                                  "default": Dashboard.default_spider(rows)})

    async def status(request: web.Request) -> web.Response:
        return web.json_response(await run(dashboard.status, spider_of(request)))

    async def charts(request: web.Request) -> web.Response:
        return web.json_response(await run(dashboard.charts, spider_of(request)))

    async def events(request: web.Request) -> web.StreamResponse:
        """Server-sent events: the spider's status every ``interval`` seconds (event "status"), or what
        went wrong reading it (event "problem"), until the page goes away."""
        spider = spider_of(request)
        stream = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-store",
                                             "X-Accel-Buffering": "no"})
        await stream.prepare(request)
        await stream.write(f"retry: {int(dashboard.interval * 1000)}\n\n".encode())
        try:
            while True:
                try:
                    data = await asyncio.to_thread(dashboard.status, spider)
                    message = f"event: status\ndata: {json.dumps(data)}\n\n"
                except Exception as exc:
                    message = f"event: problem\ndata: {json.dumps({'error': f'{type(exc).__name__}: {exc}'[:500]})}\n\n"
                await stream.write(message.encode())
                await asyncio.sleep(dashboard.interval)
        except ConnectionResetError:  # the page went away
            pass
        return stream

    async def body_ids(request: web.Request) -> list[str] | None:
        try:
            body = await request.json() if request.can_read_body else {}
        except json.JSONDecodeError:
            raise web.HTTPBadRequest(text='400: the body must be JSON: {"ids": [...]} or {"all": true}\n') from None
        if not isinstance(body, dict):
            raise web.HTTPBadRequest(text='400: the body must be a JSON object: {"ids": [...]} or {"all": true}\n')
        if body.get("all") is True:
            return None
        ids = body.get("ids")
        if not isinstance(ids, list) or not ids or not all(isinstance(i, str) for i in ids):
            raise web.HTTPBadRequest(text='400: name the entries: {"ids": ["<id>", ...]} or {"all": true}\n')
        return ids

    def action(method: Callable[..., Any]) -> Callable[[web.Request], Awaitable[web.Response]]:
        async def handler(request: web.Request) -> web.Response:
            spider = spider_of(request)
            args = (spider, await body_ids(request)) if method.__name__.startswith("requeue") else (spider,)
            return web.json_response(await run(method, *args))
        return handler

    def listing(method: Callable[..., Any]) -> Callable[[web.Request], Awaitable[web.Response]]:
        async def handler(request: web.Request) -> web.Response:
            return web.json_response(await run(method, spider_of(request)))
        return handler

    app = web.Application(middlewares=[guard])
    app.add_routes([
        web.get("/", page),
        web.get("/static/{name}", asset),
        web.get("/api/spiders", spiders),
        web.get("/api/spiders/{spider}/status", status),
        web.get("/api/spiders/{spider}/charts", charts),
        web.get("/api/spiders/{spider}/events", events),
        web.post("/api/spiders/{spider}/pause", action(dashboard.pause)),
        web.post("/api/spiders/{spider}/resume", action(dashboard.resume)),
        web.get("/api/spiders/{spider}/dlq", listing(dashboard.dead_letters)),
        web.post("/api/spiders/{spider}/dlq/requeue", action(dashboard.requeue_dead_letters)),
        web.get("/api/spiders/{spider}/quarantine", listing(dashboard.quarantined)),
        web.post("/api/spiders/{spider}/quarantine/requeue", action(dashboard.requeue_quarantined)),
        web.get("/api/spiders/{spider}/bad-seeds", listing(dashboard.bad_seeds)),
        web.post("/api/spiders/{spider}/bad-seeds/requeue", action(dashboard.requeue_bad_seeds)),
    ])
    return app


def listen(host: str, port: int) -> list[socket.socket]:
    """Sockets bound to ``port`` on every address ``host`` names and listening (as aiohttp would bind them), so that
    the UI's address is printed only once it can be reached. OSError when one cannot be bound (the port taken, a
    port below 1024 without the right to it, an address not this machine's): none is left open."""
    bound: list[socket.socket] = []
    try:
        found = socket.getaddrinfo(host.strip("[]") or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        for family, kind, proto, _, address in dict.fromkeys(found):
            sock = socket.socket(family, kind, proto)
            bound.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # (a port in TIME_WAIT; not one listened on)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind(address)
            sock.listen(128)
    except OSError:
        for sock in bound:
            sock.close()
        raise
    return bound


def serve(dashboard: Dashboard, sockets: list[socket.socket], token: str | None) -> None:
    """Run the app on ``sockets`` (``listen``) until Ctrl-C (SIGINT) or SIGTERM."""
    web.run_app(make_app(dashboard, token), sock=sockets, print=None, access_log_class=AccessLogger,
                access_log=logging.getLogger("crawlhub.ui.access"), handle_signals=True,
                shutdown_timeout=1)
