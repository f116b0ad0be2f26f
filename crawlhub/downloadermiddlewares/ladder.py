"""LadderMiddleware (360) and LadderBlockMiddleware (910): the rung each download goes on, per domain for the
whole cluster, and what a blocked answer does to it.

The rungs, cheapest first: ``plain`` (Scrapy's own client), ``impersonate`` (curl_cffi with a real
browser's TLS and HTTP/2 fingerprint: :mod:`crawlhub.impersonate`) and ``browser`` (Chromium, on a worker
with the browser handler). A page whose rung this worker does not have goes to that rung's lane for the
workers that have it, when some worker takes it (:mod:`crawlhub.roles`; else the highest rung this worker
has, with a warning). A domain is on plain until its answers show blocking: a status
in LADDER_BLOCK_CODES or a ban marker. Each blocked page is fetched again a rung higher at once (the
same page: its lease is replaced, as for the browser fallback), so no page is lost to a block; after
LADDER_CLIMB_AFTER blocked answers on the domain's rung, across the cluster, the domain itself moves up
and every worker sends its pages there directly. After LADDER_PROBE_AFTER seconds one request (one in
the cluster) probes the rung below: not blocked, the domain comes down; blocked, the back-off doubles.

Shared state: ``crawlhub:{ladder}`` (domain -> rung, since, why, next probe; crawlhub status shows it)
and ``crawlhub:{ladder}:blocks`` (the blocks counted towards a climb), written by one Lua script
(:data:`crawlhub.ladder.SCRIPT`). Each worker keeps a copy of the ladder and reads it again every LADDER_REFRESH
seconds, and at once after a move of its own (the ``ladder_moved`` signal): that is how it learns another
worker moved a domain.

Two middlewares because a rung is chosen before the browser decision (370), the proxy (380) and the
header profile (395), and a blocked answer is seen before the proxy's ban rules (900) and the retry
middleware (550): a site that refuses how the client opens TLS refuses every proxy alike, so the rung
climbs first, and only an answer blocked on the top rung of the crawl goes on to blame its proxy (or
to the dead-letter list).
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

from scrapy.crawler import Crawler
from scrapy.exceptions import NotConfigured
from scrapy.http import Request, Response

from crawlhub import meta, signals
from crawlhub._utils.hooks import SpiderHookError, end_page
from crawlhub._utils.urls import domain_of
from crawlhub.components import FrontierMiddleware
from crawlhub.connection import REDIS_ERRORS
from crawlhub.frontier.scripts import Script
from crawlhub.intent import leased
from crawlhub.ladder import BLOCKS, LADDER, SCRIPT, LadderCopy
from crawlhub.proxies import ban_markers, block_reason
from crawlhub.roles import PLAIN, RUNGS, Roles, lane_of, rung_pin

logger = logging.getLogger(__name__)

class LadderCalls:
    """The ladder script, called for one worker (:data:`crawlhub.ladder.SCRIPT`)."""

    def __init__(self, owner: FrontierMiddleware) -> None:
        self.owner = owner
        self.script: Script | None = None

    def __call__(self, op: str, domain: str, rung: str, *args: Any) -> tuple[dict[str, Any] | None, bool] | None:
        """The domain's state after the call (None: plain) and whether the call moved it (or claimed its probe);
        None when there is no shared Redis or it is down."""
        server = self.owner.server
        if server is None:
            return None
        if self.script is None or self.script.server is not server:
            self.script = Script(server, SCRIPT)
        try:
            raw, moved = self.script([LADDER, BLOCKS], [op, domain, rung, f"{time.time():.3f}", *args])
        except REDIS_ERRORS as exc:
            logger.warning("Redis unavailable (%s): the ladder of %s not updated", exc, domain)
            return None
        return (json.loads(raw) if raw else None), bool(moved)


def _roles_of(crawler: Crawler) -> Roles:
    if not crawler.settings.getbool("LADDER_ENABLED"):
        raise NotConfigured("LADDER_ENABLED is off")
    return Roles.from_settings(crawler.settings)


def _above(rungs: tuple[str, ...], rung: str) -> str | None:
    higher = [r for r in rungs if RUNGS.index(r) > RUNGS.index(rung)]
    return higher[0] if higher else None


def _below(rungs: tuple[str, ...], rung: str) -> str:
    lower = [r for r in rungs if RUNGS.index(r) < RUNGS.index(rung)] if rung in RUNGS else []
    return lower[-1] if lower else PLAIN


def pinned(crawler: Crawler, request: Request) -> str | None:
    """The rung a request (meta["rung"]) or its spider (``rung``) pins it to."""
    return rung_pin(request, crawler.spider)


def sent_once(request: Request) -> bool:
    """A login's form (a session's POST): never sent again a rung up (its CSRF token is spent); the login sees
    the answer."""
    return bool(request.meta.get(meta.SESSION_LOGIN)) and request.method not in ("GET", "HEAD")


def climbs(ladder: LadderBlockMiddleware, request: Request, response: Response) -> bool:
    """Whether ``ladder`` fetches this answer's page again a rung higher (a block below the top rung of the crawl,
    here or in its lane; on a rung the ladder chose: not pinned, not a login's form)."""
    rung = request.meta.get(meta.DOWNLOAD_RUNG)
    if rung is None or pinned(ladder.crawler, request) is not None or _above(ladder.roles_now.rungs(), rung) is None:
        return False
    return not sent_once(request) and bool(ladder.blocked(response))


class _Rungs(FrontierMiddleware):
    roles: Roles

    @property
    def roles_now(self) -> Roles:
        """The crawl's roles: the shared frontier's (the live workers' rungs among them), else this worker's alone."""
        frontier = self.frontier
        return frontier.roles if frontier is not None else self.roles


class LadderMiddleware(_Rungs):
    """Chooses each download's rung: its pin, else its domain's, or the rung below for a probe (order 360)."""

    def __init__(self, crawler: Crawler) -> None:
        super().__init__(crawler)
        s = crawler.settings
        self.roles = _roles_of(crawler)
        self.copy = LadderCopy(s.getfloat("LADDER_REFRESH"))  # read every LADDER_REFRESH, and on ladder_moved
        self.calls = LadderCalls(self)
        crawler.signals.connect(self.copy.moved, signal=signals.ladder_moved)

    def process_request(self, request: Request) -> Request | None:
        for key in (meta.DOWNLOAD_RUNG, meta.PROBE):  # a retry chooses again
            request.meta.pop(key, None)
        stats, roles = self.crawler.stats, self.roles_now
        pin = pinned(self.crawler, request)
        if pin is not None:
            rung, why = pin, "pinned"
        else:
            domain = domain_of(request.url)
            state = self.copy.state(self.server, domain)
            rung = str(state["rung"]) if state and state.get("rung") in RUNGS else PLAIN
            why = f"{domain} is on it"
            climbed = request.meta.get(meta.CLIMBED)
            if climbed in RUNGS and RUNGS.index(rung) <= RUNGS.index(climbed):  # blocked there: a rung above it
                rung, why = _above(roles.rungs(), str(climbed)) or rung, f"blocked on {climbed}"
            elif state and rung != PLAIN and rung in roles.can and float(state.get("probe_at", 0)) <= time.time():
                claimed = self.calls("probe", domain, rung)
                if claimed is not None:  # (the state as Redis has it now: the next probe's time among it)
                    self.copy.moved(domain, claimed[0])
                if claimed is not None and claimed[1]:  # this request probes the rung below (one in the cluster)
                    request.meta[meta.PROBE] = rung
                    rung = _below(roles.can, rung)
                    stats.inc_value("ladder/probes")
                    logger.info("Probing %s on the %s rung (on %s since %s: %s)", domain, rung, request.meta[meta.PROBE],
                                time.strftime("%H:%M:%S", time.localtime(float(state.get("since", 0)))),
                                state.get("why", ""))
        if rung not in roles.can:
            if leased(request) and roles.reachable(rung):  # to the workers that have the rung (its lane)
                stats.inc_value(f"roles/moved/{rung}")
                return roles.moved(request, rung, why)
            used = _below(roles.can, rung)
            roles.warn_once(rung, used)
            rung = used
        request.meta[meta.DOWNLOAD_RUNG] = rung
        stats.inc_value(f"ladder/rung/{rung}")
        return None


class LadderBlockMiddleware(_Rungs):
    """A blocked answer: counted towards its domain's climb and fetched again a rung higher; a probe's answer
    brings its domain down or backs it off (order 910, before the proxy's ban rules and the retries)."""

    def __init__(self, crawler: Crawler) -> None:
        super().__init__(crawler)
        s = crawler.settings
        self.roles = _roles_of(crawler)
        self.block_codes = {int(c) for c in s.getlist("LADDER_BLOCK_CODES")}
        self.climb_after = max(1, s.getint("LADDER_CLIMB_AFTER"))
        self.probe_after = s.getfloat("LADDER_PROBE_AFTER")
        self.probe_max = max(self.probe_after, s.getfloat("LADDER_PROBE_MAX"))
        self.markers: list[str] | None = None
        self.calls = LadderCalls(self)

    def blocked(self, response: Response) -> str:
        """Why this answer shows blocking ('' = it does not)."""
        if self.markers is None:  # the settings' and the spider's ban markers, once
            self.markers = ban_markers(self.crawler.settings, self.crawler.spider)
        return block_reason(response, self.block_codes, self.markers, self.crawler.spider)

    def _call(self, op: str, domain: str, rung: str, *args: Any) -> dict[str, Any] | None:
        result = self.calls(op, domain, rung, *args)
        if result is None:
            return None
        state, moved = result
        if moved:
            self.crawler.signals.send_catch_log(signals.ladder_moved, domain=domain, state=state)
        return state if moved else None

    def process_response(self, request: Request, response: Response) -> Request | Response:
        rung = request.meta.get(meta.DOWNLOAD_RUNG)
        if rung is None or pinned(self.crawler, request) is not None:
            return response
        domain, stats = domain_of(request.url), self.crawler.stats
        try:
            why = self.blocked(response)
        except SpiderHookError as exc:  # a mistake in the spider's is_blocked: the page ends, saying so
            return end_page(request, exc, status=response.status)
        probe = request.meta.get(meta.PROBE)
        if probe:
            self._call("probed", domain, rung, "" if why else "1", self.probe_after, self.probe_max)
            if not why:
                stats.inc_value("ladder/descents")
                logger.info("%s is not blocked on the %s rung any more: every worker sends it there again", domain, rung)
                return response
            logger.info("%s is still blocked on the %s rung (%s): the next probe waits twice as long", domain, rung, why)
        if not why:
            return response
        stats.inc_value(f"ladder/blocked/{rung}")
        roles = self.roles_now
        up = _above(roles.rungs(), rung)
        if up is None or (up not in roles.can and not leased(request)):
            return response  # the top rung of the crawl (or of this worker, off the shared frontier): the answer as it is
        if not probe:
            climbed = self._call("block", domain, rung, self.climb_after, up, self.probe_after,
                                 f"{why} on {rung} ({request.url})"[:300])
            if climbed is not None:
                stats.inc_value("ladder/climbs")
                logger.warning("%s is blocked on the %s rung (%d answers like %s at %s): every worker sends it on the "
                               "%s rung now, probing %s again in %.0f s", domain, rung, self.climb_after, why,
                               request.url, climbed["rung"], rung, self.probe_after)
        if sent_once(request):
            return response
        elsewhere = up not in roles.can  # (queued in the rung's lane, for the workers that have it)
        logger.info("%s was blocked on the %s rung (%s): fetching it again on %s%s", request.url, rung, why, up,
                    " (by a worker that has it)" if elsewhere else "")
        kept = {k: v for k, v in request.meta.items() if k not in (meta.DOWNLOAD_RUNG, meta.PROBE)}
        lane = {meta.LANE: lane_of(up)} if elsewhere else {}
        return request.replace(dont_filter=True, meta={**kept, meta.CLIMBED: rung, meta.SAME_PAGE: True, **lane})
