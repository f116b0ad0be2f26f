"""LeaseEnds: how a worker's leases end (the frontier client's part that carries out intent).

* a component's decision (crawlhub.intent: retry, postpone, dead letter, drop),
  carried to the scheduler in a request's meta;
* a page whose items are stored (``finish``): acked, or dead-lettered if its
  callback failed; its URL status news go to the store (``status_observed``).

An end that is its own script call (a retry, a postponement, a dead letter) is
sent at once. Redis down: the lease goes back in the book, where it is renewed (nobody
reclaims it) and the warden's sweep leaves it alone, and the call is held
until a round trip succeeds again; then the held ends are sent in order.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING

from scrapy import Request

from crawlhub import meta
from crawlhub import signals as crawlhub_signals
from crawlhub.connection import REDIS_ERRORS
from crawlhub.frontier.leasebook import Lease
from crawlhub.frontier.records import Finish, lease_domain
from crawlhub.intent import End
from crawlhub.quality import dlq_reason

if TYPE_CHECKING:
    from crawlhub.frontier.client import FrontierClient

logger = logging.getLogger(__name__)

# (lease, what it is, the script call, what to do with its outcome)
HeldEnd = tuple[Lease, str, Callable[[], bool], Callable[[bool], None]]


class LeaseEnds:
    def __init__(self, client: FrontierClient):
        self.client = client
        self.held: list[HeldEnd] = []

    def end(self, request: Request) -> str | None:
        """Carry out what a component decided of a leased request (``meta[crawlhub.meta.END]``, crawlhub.intent):
        "retry", "dlq", "postponed", "dropped"; None when the request holds no lease of this worker."""
        end: End = request.meta.pop(meta.END)
        lease = self.client.leases.of(request)
        if lease is None:  # its lease ended already (told twice: the first end is the one carried out)
            logger.debug("Not carried out on %s (%s): its lease %s has ended already", request.url, end.get("how"),
                         request.meta.get(meta.LEASE))
            return None
        if lease.downloading:  # it never reached the download, or no hook saw it end: its slot frees
            self.client.leases.download_finished(lease.id, Finish(lease_domain(lease.id), lease.id, "", 0.0))
        how, reason, status = end.get("how"), end.get("reason", ""), end.get("status")
        if how == "retry":
            return self.retry(request, reason, end.get("after", 0.0), status)
        if how == "postpone":
            return "postponed" if self.postpone(request, end.get("after", 0.0), reason) else "held"
        if how == "dead_letter":
            self.dead_letter(request, reason, status=status)
            return "dlq"
        self.client.stats.inc_value("leases/dropped")
        logger.debug("Dropped %s: %s", request.url, reason)
        lease.after_store = request.meta.get(meta.AFTER_STORE) or []  # a 304: the fetch's news for the status store
        if lease.after_store and self.client.leases.wait_for_store:
            lease.output_done = True
            self.after_store_flush(lease)
        else:
            self.client.leases.pop(lease.id)
            self.client.ack([lease.id])
        return "dropped"

    def after_store_flush(self, lease: Lease) -> None:
        """A done page (a store that acknowledges writes is in use): its URL status news go to the store now, so
        that the flush that writes its items writes them too (after the items), and the lease ends after that
        flush (``finish``). Never ack first and write the news later: a worker killed in between would leave a
        page acked whose next visit is nowhere."""
        if lease.error is None and lease.after_store:
            self.client.signals.send_catch_log(crawlhub_signals.status_observed, updates=list(lease.after_store))
        self.client.leases.ready.append(lease.id)

    def finish(self, lease_ids: list[str]) -> None:
        """End done leases (their items and status news are stored): ack, or dead-letter if the callback failed."""
        for lease_id in lease_ids:
            lease = self.client.leases.get(lease_id)
            if lease is not None and lease.error:
                self._dead_letter(lease, json.loads(lease.payload).get("meta", {}), lease.error)
                continue
            self.client.leases.pop(lease_id)
            self.client.ack([lease_id])

    def retry(self, request: Request, reason: str, retry_after: float = 0.0, status: int | None = None) -> str | None:
        """Send the request back through the shared frontier after a backoff, or to the DLQ.

        Returns "retry", "dlq", or None when the request holds no lease of ours.
        """
        lease = self.client.leases.of(request)
        if lease is None:
            return None
        self.client.flush()
        attempts = self.client.policy.attempts(request.meta)
        if self.client.policy.gives_up(attempts):
            self.dead_letter(request, error=reason, status=status, attempts=attempts)
            return "dlq"
        delay = self.client.policy.backoff(attempts, retry_after)
        again = request.replace(dont_filter=True)
        again.meta.pop(meta.LEASE, None)
        again.meta[meta.ATTEMPTS] = attempts
        again.meta.setdefault(meta.FIRST_ATTEMPT, time.time())
        self.client.leases.pop(lease.id)

        def retried(moved: bool) -> None:
            if moved:
                self.client.stats.inc_value("retry/count")
                self.client.stats.inc_value(f"retry/reason_count/{reason.split(':')[0]}")
                self.client.count("retries")
                logger.info("Retrying %s in %.1fs (attempt %d of %d): %s", request.url, delay, attempts + 1,
                            self.client.policy.retry_times + 1, reason)
            else:
                self._gone(lease, f"retry ({reason})")

        move = partial(self.client.ops.delay, lease.id, self.client.serializer.encode(again), delay)
        self.send(lease, "retry", move, retried)
        return "retry"

    def postpone(self, request: Request, seconds: float, reason: str) -> bool:
        """Put the request back for later without counting an attempt (its site is not ready)."""
        lease = self.client.leases.of(request)
        if lease is None:
            return False
        self.client.flush()
        later = request.replace(dont_filter=True)
        later.meta.pop(meta.LEASE, None)
        later.meta.pop(meta.RESLOT, None)
        self.client.leases.pop(lease.id)

        def postponed(moved: bool) -> None:
            if moved:
                self.client.stats.inc_value("scheduler/postponed")
                logger.info("Postponed %s for %.0fs: %s", request.url, seconds, reason)
            else:
                self._gone(lease, f"postponement ({reason})")

        move = partial(self.client.ops.delay, lease.id, self.client.serializer.encode(later), seconds)
        return self.send(lease, "postponement", move, postponed)

    def dead_letter(self, request: Request, error: str, status: int | None = None, attempts: int | None = None) -> None:
        lease = self.client.leases.of(request)
        if lease is not None:
            self._dead_letter(lease, request.meta, error, status, attempts)

    def _dead_letter(self, lease: Lease, request_meta: dict[str, object], error: str, status: int | None = None,
                     attempts: int | None = None) -> None:
        self.client.leases.pop(lease.id)
        self.client.flush()  # the page's links are queued before its lease ends
        record = self.client.policy.dead_letter(self.client.spider_name, self.client.worker, lease.url, lease.payload, request_meta,
                                         error, status, attempts)

        def dead_lettered(moved: bool) -> None:
            if moved:
                self.client.stats.inc_value("dlq/count")
                self.client.stats.inc_value(f"dlq/reason/{dlq_reason(error, status)}")  # the quality figures' DLQ by reason
                logger.error("Gave up on %s after %d attempts (%s); in %s", lease.url, record.attempts, error,
                             self.client.keys.part_of(lease_domain(lease.id)).dlq)
            else:
                self._gone(lease, f"dead letter ({error})")

        self.send(lease, "dead letter", partial(self.client.ops.dead_letter, lease.id, record), dead_lettered)

    def _gone(self, lease: Lease, what: str) -> None:
        """A lease's end was not written: its lease is not in the frontier any more. Said, with where the page is."""
        self.client.stats.inc_value("frontier/lease_gone")
        logger.warning("The %s of %s was not written: its lease %s is no longer in the frontier. Either it expired "
                       "before this worker renewed it, and the request is queued again (another worker fetches it), "
                       "or the frontier was reset since it was leased (the page belongs to the crawl that ended)",
                       what[:300], lease.url, lease.id)

    def give_back(self) -> None:
        """At close: every lease still held goes back to the shared queue (as it was, if the frontier vanished)."""
        client = self.client
        try:
            client.counters.send()
        except REDIS_ERRORS as exc:
            logger.warning("Could not send %d counters to Redis at close: %s", sum(client.counters.pending.values()), exc)
        returned = 0
        for lease in client.leases:
            try:
                if client.lost:  # its lease record vanished with the frontier: queued again as it was
                    client.ops.push(lease.payload, lease.priority, lease_domain(lease.id))
                    returned += 1
                    continue
                returned += client.ops.requeue(lease.id, lease.payload, lease.priority)
            except REDIS_ERRORS as exc:
                logger.error("Could not give lease %s (%s) back: %s; it returns when it expires", lease.id, lease.url, exc)
        if returned:
            logger.info("Gave %d unfinished requests back to the shared queue", returned)
        client.leases.clear()
        if client.budget_exhausted:
            logger.info("Crawl budget used up; left in the frontier: %(queued)d queued, %(delayed)d waiting to retry",
                        client.ops.counts())

    # -- Redis down: held, then sent in order ----------------------------------------------------------

    def send(self, lease: Lease, what: str, move: Callable[[], bool], then: Callable[[bool], None]) -> bool:
        """Send a lease's end; ``then`` gets the outcome (at once, or when Redis is back)."""
        try:
            moved = move()
        except REDIS_ERRORS as exc:
            lease.output_done = True
            self.client.leases.restore(lease)
            self.held.append((lease, what, move, then))
            self.client.redis_down = True
            logger.warning("Redis unavailable (%s): the %s of %s is held until it is back; its lease is renewed "
                           "meanwhile", exc, what, lease.url)
            return False
        then(moved)
        return moved

    def send_held(self) -> None:
        """The lease ends held while Redis was down, in order; what fails again stays held."""
        while self.held:
            lease, what, move, then = self.held[0]
            try:
                moved = move()
            except REDIS_ERRORS:
                return
            self.held.pop(0)
            self.client.leases.pop(lease.id)
            logger.info("Redis is back: the held %s of %s is sent", what, lease.url)
            then(moved)
