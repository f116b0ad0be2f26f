"""Workers with roles: which rungs a worker downloads on (WORKER_CAPABILITIES), and the lanes that keep
each kind of work with the workers that can do it (docs/anti-blocking.md, "Workers with roles").

A request that needs a rung above plain (a spider's pin, ``meta["browser"]``, its domain's rung on the
ladder, a block on the highest rung its worker has) is queued in its domain's **lane** for that rung:
``<domain>#browser`` or ``<domain>#impersonate`` beside the domain's own queue. A lane has a schedule of its
own, which only a worker with the rung scans, so a plain worker never waits behind browser work and a
browser worker never waits behind plain work; the lane keeps its domain's politeness (one rate, one
concurrency cap and one slow-down for all of a domain's lanes: lua/_helpers.lua). A worker that leased a
request it cannot download moves it to its lane once (the same page: its lease is replaced).

Lanes are used for a rung only when some worker can take them: this worker has the rung, a live worker of
the spider declared it in its heartbeat, or this worker's own capabilities were set by hand (a cluster run
with roles: a browser worker may be started, or scaled up by KEDA, on the lane's backlog). Otherwise a
request goes on the highest rung this worker has, with a warning, as without roles: nothing waits for a
worker that nobody runs.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from typing import Any

from scrapy.http import Request

from crawlhub import meta

logger = logging.getLogger(__name__)

# The rungs, cheapest first (crawlhub.downloadermiddlewares.ladder), and the download handlers that run the two above plain.
PLAIN, IMPERSONATE, BROWSER = "plain", "impersonate", "browser"
RUNGS = (PLAIN, IMPERSONATE, BROWSER)
IMPERSONATE_HANDLER = "crawlhub.impersonate.ImpersonateDownloadHandler"  # (crawlhub.impersonate)
BROWSER_HANDLER = "crawlhub.browser_handler.BrowserDownloadHandler"  # (crawlhub.browser)
SCRAPY_HANDLER = "scrapy.core.downloader.handlers.http11.HTTP11DownloadHandler"


def is_scrapy_handler(handler: Any) -> bool:
    """Scrapy's own HTTP handler (as a path or the class): the one the impersonate handler stands in front of.
    Compared by name: reading a spider's settings (the crawlhub command does, for each spider) loads no handler."""
    name = f"{handler.__module__}.{handler.__qualname__}" if isinstance(handler, type) else handler
    return bool(name == SCRAPY_HANDLER)


# Every lane of a crawl ("" = the domains' own queues, the plain rung's), for the partitions' hints.
LANES = ("", IMPERSONATE, BROWSER)


def lane_of(rung: str) -> str:
    """The lane a rung's work is queued in ('' for plain)."""
    return "" if rung == PLAIN else rung


def queue_of(domain: str, lane: str = "") -> str:
    """The queue a domain's request goes in: the domain's own, or its lane ``<domain>#<lane>``."""
    return f"{domain}#{lane}" if lane else domain


def split_queue(queue: str) -> tuple[str, str]:
    """A queue's (domain, lane)."""
    domain, _, lane = queue.partition("#")
    return domain, lane


def can_impersonate(settings: Any) -> bool:
    """Whether this worker has the impersonate rung: on, curl_cffi installed, and one of crawlhub's handlers for https."""
    import importlib.util

    return (settings.getbool("IMPERSONATE_ENABLED") and importlib.util.find_spec("curl_cffi") is not None
            and settings.getwithbase("DOWNLOAD_HANDLERS").get("https") in (IMPERSONATE_HANDLER, BROWSER_HANDLER))


def available_rungs(settings: Any) -> tuple[str, ...]:
    """The rungs this worker's set-up can download on (its download handlers)."""
    rungs = [PLAIN]
    if can_impersonate(settings):
        rungs.append(IMPERSONATE)
    if settings.getwithbase("DOWNLOAD_HANDLERS").get("https") == BROWSER_HANDLER:
        rungs.append(BROWSER)
    return tuple(rungs)


def declared(settings: Any) -> tuple[str, ...]:
    """WORKER_CAPABILITIES as given ((): not set, the worker takes what it can run). Raises ValueError on a name
    that is not a rung."""
    names = [str(n).strip().lower() for n in settings.getlist("WORKER_CAPABILITIES") if str(n).strip()]
    unknown = [n for n in names if n not in RUNGS]
    if unknown:
        raise ValueError(f"WORKER_CAPABILITIES names {', '.join(unknown)}: a worker's capabilities are rungs, "
                         f"some of {', '.join(RUNGS)}")
    return tuple(r for r in RUNGS if r in names)


def capabilities(settings: Any) -> tuple[str, ...]:
    """The rungs this worker downloads on: WORKER_CAPABILITIES, else what it can run. Raises ValueError when a
    declared rung cannot run here (the crawl would otherwise lease work it cannot do)."""
    named, can = declared(settings), available_rungs(settings)
    if not named:
        return can
    missing = [r for r in named if r not in can]
    if missing:
        how = {IMPERSONATE: "install crawlhub[impersonate] (curl_cffi) and keep IMPERSONATE_ENABLED on",
               BROWSER: "install Chromium (crawlhub's browser handler is installed for a worker with the browser "
                        "capability)"}
        raise ValueError(f"WORKER_CAPABILITIES names {', '.join(missing)}, which this worker cannot run: "
                         + "; ".join(how.get(r, r) for r in missing))
    return named


class Roles:
    """This worker's capabilities and, from the heartbeats, those of the live workers of its spider.

    ``own``: the rungs whose lanes this worker leases from (WORKER_CAPABILITIES, else ``can``); ``can``: the rungs
    its download handlers run (plain always: a browser worker downloads a page that came down the ladder on plain).
    The live workers' are a copy of their records in ``<spider>:workers``: read again with the live-worker count
    by the upkeep (every 2 s), which is how this worker learns that a browser worker came or went.
    """

    def __init__(self, own: Iterable[str], can: Iterable[str] | None = None, explicit: bool = False) -> None:
        self.own = tuple(own)
        self.can = tuple(r for r in RUNGS if r in {PLAIN, *self.own, *(can or ())})
        self.explicit = explicit  # WORKER_CAPABILITIES set by hand: lanes for every rung (a cluster run with roles)
        self.live: set[str] = set(self.own)  # rungs some live worker of the spider takes (this one's included)
        self.warned: set[str] = set()

    @classmethod
    def from_settings(cls, settings: Any) -> Roles:
        named = declared(settings)
        return cls(capabilities(settings), available_rungs(settings), bool(named))

    @property
    def lanes(self) -> list[str]:
        """The lanes this worker leases from: its rungs', and, without declared roles, those of rungs no live worker
        takes (work left in a lane when its last worker went: downloaded on the highest rung this worker has, as
        when no worker has the rung, rather than left waiting for nobody)."""
        orphans = [] if self.explicit else [r for r in RUNGS if r not in self.own and r not in self.live]
        return [lane_of(r) for r in RUNGS if r in self.own or r in orphans]

    def saw(self, records: Iterable[dict[str, Any]]) -> None:
        """The live workers' heartbeat records (``capabilities``: a record without them is of a worker from before
        roles, which downloads on every rung it has: taken as plain only)."""
        live = set(self.own)
        for record in records:
            live.update(r for r in record.get("capabilities") or [PLAIN] if r in RUNGS)
        self.live = live

    def reachable(self, rung: str) -> bool:
        """Whether a page can be fetched on ``rung``: this worker runs it, or its lane has a taker (a live worker that
        takes it, or one a role deployment starts)."""
        return rung in self.can or rung in self.live or self.explicit

    def rungs(self) -> tuple[str, ...]:
        """The rungs a page can be fetched on in this crawl, cheapest first."""
        return tuple(r for r in RUNGS if self.reachable(r))

    def lane_for(self, request: Request, spider: Any = None, domain_rung: str | None = None) -> str:
        """The lane a request is queued in: the one it was moved to, else the one its pin (``meta["rung"]``,
        ``meta["browser"]``, the spider's ``rung`` or ``use_browser``) or else its domain's rung on the ladder names,
        when some worker takes it."""
        lane = request.meta.get(meta.LANE)
        if lane:
            return str(lane)
        rung = pinned_rung(request, spider)
        if rung is None and request.meta.get("browser") is not False:
            rung = domain_rung
        if rung is None or rung == PLAIN or not (rung in self.live or self.explicit):
            return ""  # (a rung nobody takes as a lane: this worker downloads it on the highest rung it has)
        return lane_of(rung)

    def moved(self, request: Request, rung: str, why: str, **extra: Any) -> Request:
        """The same page, for the workers that have ``rung`` (its lease is replaced: the scheduler queues it in the
        lane); ``extra``: meta for the worker that takes it."""
        logger.info("%s needs the %s rung (%s), which this worker does not have: queued for a worker that has it",
                    request.url, rung, why)
        kept = {k: v for k, v in request.meta.items() if k not in (meta.DOWNLOAD_RUNG, meta.PROBE)}
        return request.replace(dont_filter=True, meta={**kept, **extra, meta.LANE: lane_of(rung), meta.SAME_PAGE: True})

    def warn_once(self, rung: str, used: str) -> None:
        if rung not in self.warned:
            self.warned.add(rung)
            logger.warning("This worker cannot download on the %s rung and no live worker can (%s): using %s", rung,
                           "install crawlhub[impersonate] (curl_cffi), IMPERSONATE_ENABLED" if rung == IMPERSONATE
                           else "BROWSER_ENABLED, WORKER_CAPABILITIES=browser, or a spider with use_browser", used)


def rung_pin(request: Request, spider: Any = None) -> str | None:
    """The rung ``meta["rung"]`` or the spider's ``rung`` pins a request to (the ladder does not move it). Raises
    ValueError on a pin that is not a rung."""
    pin = request.meta.get(meta.RUNG)
    if pin is None and spider is not None:
        pin = getattr(spider, "rung", None)
    if pin is None:
        return None
    if pin not in RUNGS:
        raise ValueError(f"rung {pin!r} is not one of {', '.join(RUNGS)} ({request.url})")
    return str(pin)


def pinned_rung(request: Request, spider: Any = None) -> str | None:
    """The rung a request needs whatever its domain's rung: its :func:`rung_pin`, else the browser for
    ``meta["browser"] = True`` or a spider with ``use_browser``."""
    pin = rung_pin(request, spider)
    if pin is None and (request.meta.get("browser") is True
                        or (request.meta.get("browser") is None and getattr(spider, "use_browser", False))):
        pin = BROWSER
    return pin


def live_records(records: Iterable[dict[str, Any]], dead_after: float, now: float | None = None) -> list[dict[str, Any]]:
    """The heartbeat records of the workers that are running and beat within ``dead_after`` seconds."""
    now = time.time() if now is None else now
    return [r for r in records if r.get("state") == "running" and now - r.get("last_beat", 0) <= dead_after]


def lane_backlog(queued: dict[str, int], live: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per lane above plain with work queued (``queued``: requests per queue, ``<spider>:queued``), and the plain
    lane when no live worker takes it: its requests, domains, and the live workers that take it (``live``: their
    heartbeat records). A lane no live worker takes waits for one (`crawlhub status` says so; a role deployment
    scales on it)."""
    records = list(live)
    rows = []
    for lane in LANES:
        waiting = {q: n for q, n in queued.items() if split_queue(q)[1] == lane and n > 0}
        rung = lane or PLAIN
        takers = [r.get("worker", "?") for r in records if rung in (r.get("capabilities") or [PLAIN])]
        if waiting and (lane or not takers):  # (the plain lane only when nobody takes it: workers all of one role)
            rows.append({"lane": rung, "queued": sum(waiting.values()), "domains": len(waiting), "workers": takers})
    return rows


def format_lanes(rows: list[dict[str, Any]]) -> list[str]:
    """`crawlhub status`'s lines for :func:`lane_backlog`."""
    lines = []
    for row in rows:
        who = (f"taken by {len(row['workers'])} live worker(s)" if row["workers"] else
               f"NO live worker takes it: start one with WORKER_CAPABILITIES={row['lane']}")
        lines.append(f"lane {row['lane']}: {row['queued']} requests queued for {row['domains']} domain(s), {who}")
    return lines
