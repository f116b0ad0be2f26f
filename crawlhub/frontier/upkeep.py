"""Upkeep: the timers of one worker's frontier client, and waking Scrapy's engine.

* the poller (FRONTIER_POLL_INTERVAL) runs the lease warden's sweep
  (crawlhub/frontier/warden.py), sends what is pending and wakes the
  engine when other workers queued requests while this one starved: Scrapy
  asks an idle scheduler again only on its 5-second heartbeat; while the
  frontier has nothing anywhere it asks at gaps doubling up to
  FRONTIER_IDLE_POLL_MAX, so an idle worker costs Redis less;
* maintenance (LEASE_MAINTENANCE_INTERVAL) sends the cluster counters,
  renews this worker's leases every LEASE_TTL / 3, counts the live workers
  and reclaims dead workers' expired leases (LEASE_RECLAIM_INTERVAL);
* wake-ups: when the frontier says when the next domain is ready, the engine
  is woken then (``crawlhub._compat.wake_engine``: a private API of Scrapy's;
  without it, the heartbeat still works).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import redis
from scrapy.crawler import Crawler
from twisted.internet import task
from twisted.internet.base import DelayedCall

from crawlhub._compat import wake_engine
from crawlhub.connection import REDIS_ERRORS
from crawlhub.frontier.policy import Requeue
from crawlhub.roles import Roles, live_records

if TYPE_CHECKING:
    from crawlhub.frontier.client import FrontierClient

logger = logging.getLogger(__name__)


class Upkeep:
    def __init__(self, crawler: Crawler, frontier: FrontierClient, has_pending: Callable[[], bool],
                 sweep: Callable[[], int] = lambda: 0, on_store_drained: list[Callable[[], None]] | None = None):
        settings = crawler.settings
        self.crawler = crawler
        self.frontier = frontier
        self.has_pending = has_pending  # the scheduler's: anything for this worker to take
        self.sweep = sweep  # the lease warden's: end the leases whose requests left Scrapy unseen
        self.poll_interval = settings.getfloat("FRONTIER_POLL_INTERVAL")
        self.maintenance_interval = settings.getfloat("LEASE_MAINTENANCE_INTERVAL")
        self.reclaim_interval = settings.getfloat("LEASE_RECLAIM_INTERVAL")
        self.dead_after = dead_after(settings)
        self.timers: list[task.LoopingCall] = []
        self.starved = False  # the engine found nothing: wake it when work appears
        # while starved and nothing is pending anywhere, the poller asks at growing gaps (doubling from
        # FRONTIER_POLL_INTERVAL up to FRONTIER_IDLE_POLL_MAX); work seen anywhere starts over
        self.idle_poll_max = max(self.poll_interval, settings.getfloat("FRONTIER_IDLE_POLL_MAX", 2.0))
        self._idle_gap = self._idle_next = 0.0
        self.not_before = 0.0  # monotonic time before which no domain can be ready
        self._wakeup: DelayedCall | None = None
        self._nudge: DelayedCall | None = None
        self._last_renew = self._last_reclaim = self._last_count = 0.0
        frontier.on_redis_back.append(self._renew_now)
        if on_store_drained is not None:
            on_store_drained.append(self._starve)  # let the poller wake the engine

    def start(self) -> None:
        for interval, func in ((self.poll_interval, self.poll), (self.maintenance_interval, self.maintain)):
            if interval > 0:
                timer = task.LoopingCall(func)
                timer.start(interval, now=False)
                self.timers.append(timer)

    def stop(self) -> None:
        for timer in self.timers:
            if timer.running:
                timer.stop()
        for call in (self._wakeup, self._nudge):
            if call is not None and call.active():
                call.cancel()

    def _renew_now(self) -> None:
        self._last_renew = 0.0

    def _starve(self) -> None:
        self.starved = True

    # -- waking the engine ----------------------------------------------------------------------------
    def poll(self) -> None:
        """End leaked leases; send what is pending; wake the engine if work appeared while it starved."""
        frontier = self.frontier
        try:
            self.sweep()
        except Exception:  # noqa: BLE001 - a timer must not die
            logger.exception("The lease sweep failed")
        if frontier.has_pending_writes:
            frontier.flush()
        if not self.starved:
            self._idle_gap, self._idle_next = 0.0, 0.0
            return
        now = time.monotonic()
        if frontier.budget_exhausted or now < self.not_before or now < self._idle_next:
            return
        try:
            pending = self.has_pending()
        except Exception as exc:  # noqa: BLE001 - a timer must not die
            logger.debug("frontier poll failed: %s", exc)
            return
        if pending:
            self._idle_gap, self._idle_next = 0.0, 0.0
            self.wake()
        else:  # nothing anywhere: ask again less often, up to FRONTIER_IDLE_POLL_MAX (an idle worker's main cost)
            self._idle_gap = min(self.idle_poll_max, max(self.poll_interval, self._idle_gap * 2))
            self._idle_next = now + self._idle_gap - self.poll_interval / 2

    def wake(self) -> None:
        if wake_engine(self.crawler):
            self.starved = False

    def sleep(self, wait: float | None) -> None:
        """Nothing could be leased: ask again when the frontier says a domain is ready.

        ``wait`` comes from the lease script (None: nothing queued or delayed,
        the poller watches). The sleep is capped at FRONTIER_POLL_INTERVAL so
        work that other workers queue for other domains is seen soon; the
        worker sends Redis nothing while it sleeps.
        """
        if wait is None:
            self.not_before = 0.0
            return
        wait = min(wait, self.poll_interval or 1.0)
        self.not_before = time.monotonic() + wait
        self.wake_in(wait)

    def early(self) -> float:
        """Seconds until a domain can be ready (0 or less: ask the frontier now)."""
        return self.not_before - time.monotonic()

    def work_arrived(self) -> None:
        """A request was enqueued: its domain may be ready now."""
        self.not_before = 0.0

    def wake_in(self, seconds: float) -> None:
        """Wake the engine in ``seconds`` (unless a wake-up is already due).

        Without this, the engine would ask again only on its 5-second heartbeat.
        """
        # a hair later than asked: a timer that fires early would find nothing ready yet
        self._wakeup = self._wake_later(self._wakeup, max(seconds, 0.0) + 0.002)

    def nudge_in(self, seconds: float) -> None:
        """Wake the engine in ``seconds`` at the latest, whatever other wake-up is due (the lease gate's wait:
        a completing download usually asks sooner)."""
        self._nudge = self._wake_later(self._nudge, max(seconds, 0.0) + 0.001)

    def _wake_later(self, due: DelayedCall | None, seconds: float) -> DelayedCall:
        """A timer that wakes the engine in ``seconds``; ``due`` itself while it is still to fire."""
        if due is not None and due.active():
            return due
        from twisted.internet import reactor as installed

        reactor: Any = installed  # the running reactor (typed as a module by Twisted's stubs)
        return reactor.callLater(max(seconds, 0.0), self.wake)  # type: ignore[no-any-return]

    # -- leases -----------------------------------------------------------------------------------------
    def maintain(self) -> None:
        """Renew this worker's leases; reclaim dead workers' expired leases; retry held writes."""
        frontier = self.frontier
        now = time.monotonic()
        try:
            if not self.poll_interval:  # the poller sweeps otherwise
                self.sweep()
            frontier.flush()
            frontier.counters.send()
            # a page over and waiting for the store's flush is marked so in its lease, at the next look (the renewal
            # of those leases alone, between two of all of them): this worker's death would not be its doing, and
            # is not counted against it (LEASE_MAX_EXPIRIES). Not yet marked, it is counted: the safe side.
            done = set(frontier.leases.done_unsent())  # (a set: renew looks each lease up in it)
            renew_all = now - self._last_renew >= frontier.lease_ttl / 3
            if renew_all or done:
                if renew_all:
                    self._last_renew = now
                lost = frontier.ops.renew(frontier.leases.ids() if renew_all else done, frontier.lease_ttl, done)
                frontier.leases.done_sent(done)
                if lost:
                    frontier.stats.inc_value("leases/lost", len(lost))
                    logger.warning("%d leases expired before this worker renewed them (they may be crawled twice)",
                                   len(lost))
            if now - self._last_count >= 2.0:
                self._last_count = now
                frontier.live_workers, frontier.leases_elsewhere = live_workers(
                    frontier.server, frontier.keys.workers, self.dead_after, frontier.worker, frontier.roles)
                frontier.ops.set_lanes(frontier.roles.lanes)
            if now - self._last_reclaim >= self.reclaim_interval:
                self._last_reclaim = now
                reclaim(frontier, self.reclaim_interval)
        except REDIS_ERRORS as exc:
            frontier.redis_down = True
            logger.warning("Lease maintenance skipped: Redis unavailable (%s)", exc)
        except Exception:  # noqa: BLE001 - a timer must not die
            logger.exception("Lease maintenance failed")


def redis_uptime(server: redis.Redis) -> int:
    """Seconds since the Redis (or, for a cluster, its youngest primary) started."""
    info = server.info("server")
    if "uptime_in_seconds" in info:
        return int(info["uptime_in_seconds"])
    ups = [int(v.get("uptime_in_seconds", 0)) for v in info.values() if isinstance(v, dict)]
    return min(ups) if ups else 0


def dead_after(settings: Any) -> float:
    """Seconds without a heartbeat after which a worker counts as dead (WORKER_DEAD_AFTER, else 3 heartbeats)."""
    return settings.getfloat("WORKER_DEAD_AFTER") or 3 * (settings.getfloat("WORKER_HEARTBEAT_INTERVAL") or 5.0)


def live_workers(server: redis.Redis, key: str, dead_after: float, me: str = "",
                 roles: Roles | None = None) -> tuple[int, int]:
    """Live workers of the spider (heartbeats in hash ``key``), so that a domain's slots are shared among them,
    and the leases the live ones other than ``me`` held at their last heartbeat. ``roles`` learns the rungs the
    live workers take (which lanes have a worker)."""
    records = []
    for raw in server.hvals(key):
        try:
            records.append(json.loads(raw))
        except ValueError:
            continue
    alive = live_records(records, dead_after)
    if roles is not None:
        roles.saw(alive)
    held = sum(int(r.get("leases") or 0) for r in alive if r.get("worker") != me)
    return max(1, len(alive)), held


def reclaim(frontier: FrontierClient, interval: float = 0.0) -> int:
    """Put expired leases (their worker died) back in the queue, counting an attempt.

    One worker of the cluster per ``interval`` (LEASE_RECLAIM_INTERVAL) looks: the one that takes
    ``<spider>:reclaim_lock``, which it keeps for the interval, so the scan costs Redis the same with
    1 or 100 workers (the others send one SET NX); and it looks at the next interval / LEASE_TTL of
    the partitions, so that each is looked at once per LEASE_TTL (an expired lease is back in its
    queue within about two LEASE_TTLs of its worker's death). Not while Redis has
    been up, or reachable from this worker, for less than LEASE_TTL: after an outage every live
    worker's leases look expired until it has renewed them.
    """
    server, keys, ttl = frontier.server, frontier.keys, frontier.lease_ttl
    if time.monotonic() - frontier.redis_back_at < ttl:
        return 0
    hold = max(interval, 0.1)
    if not server.set(keys.reclaim_lock, frontier.worker, nx=True, px=int(hold * 1000)):
        return 0
    if redis_uptime(server) < ttl:
        return 0
    reclaimed = done = 0
    try:
        # by the timer, a share of the partitions each time, in turn: each once per LEASE_TTL. The turn is counted
        # in Redis, not read off the clock: scans come at jittered times from whichever worker takes the lock, and
        # a clock's turn could skip the same shares every time (scans every other interval: half the partitions)
        share, turn = (interval / ttl, int(server.incr(keys.reclaim_turn))) if interval else (1.0, 0)
        for expired in frontier.ops.expired(share=share, turn=turn):
            if expired.lease_id in frontier.leases:  # ours, and alive: renew missed, keep it
                continue
            fate = frontier.policy.after_expiry(expired, frontier.spider_name)
            if fate is None:
                frontier.ack([expired.lease_id])
            elif isinstance(fate, Requeue):
                if frontier.ops.requeue(expired.lease_id, fate.payload, fate.priority):
                    reclaimed += 1
                    if expired.done:
                        done += 1
                    logger.info("Reclaimed %s from %s (lease expired%s)", fate.url, expired.worker,
                                ": the page was over, its items not yet stored; not counted against it"
                                if expired.done else "")
            else:
                frontier.ops.dead_letter(expired.lease_id, fate)
    finally:
        if not interval:  # (a reclaim asked for once, not by the timer: the next may look at once)
            server.delete(keys.reclaim_lock)
    if reclaimed:
        frontier.stats.inc_value("leases/reclaimed", reclaimed)
        frontier.count("reclaimed", reclaimed)
    if done:
        frontier.stats.inc_value("leases/reclaimed_done", done)
        frontier.count("reclaimed_done", done)
    return reclaimed
