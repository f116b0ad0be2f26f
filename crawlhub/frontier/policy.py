"""RetryPolicy: how many attempts a request gets, how long it waits between them, and its dead letter.

Used by the frontier client for a failed download (RETRY_TIMES,
RETRY_BACKOFF_BASE, RETRY_BACKOFF_MAX: exponential backoff with jitter, at
least what Retry-After asked) and for a lease whose worker died
(LEASE_MAX_EXPIRIES). No Redis here: the client carries out what it decides.
"""

from __future__ import annotations

import json
import random
import time
from dataclasses import dataclass
from typing import Any

from scrapy.settings import BaseSettings

from crawlhub import meta
from crawlhub.frontier.records import DeadLetter, ExpiredLease


@dataclass(frozen=True)
class Requeue:
    """An expired lease goes back to the front of its queue."""

    payload: bytes
    priority: int
    url: str


@dataclass(frozen=True)
class RetryPolicy:
    retry_times: int = 2
    backoff_base: float = 2.0
    backoff_max: float = 300.0
    max_expiries: int = 3

    @classmethod
    def from_settings(cls, settings: BaseSettings) -> RetryPolicy:
        return cls(settings.getint("RETRY_TIMES"), settings.getfloat("RETRY_BACKOFF_BASE"),
                   settings.getfloat("RETRY_BACKOFF_MAX"), settings.getint("LEASE_MAX_EXPIRIES"))

    @staticmethod
    def attempts(request_meta: dict[str, Any]) -> int:
        """Failed attempts, counting the one that just failed."""
        return int(request_meta.get(meta.ATTEMPTS, 0)) + 1

    def gives_up(self, attempts: int) -> bool:
        return attempts > self.retry_times

    def backoff(self, attempts: int, retry_after: float = 0.0) -> float:
        """Seconds before attempt ``attempts + 1``: doubling from the base, capped, jittered; never under Retry-After."""
        delay = min(self.backoff_max, self.backoff_base * 2 ** (attempts - 1)) * random.uniform(0.5, 1.0)
        return float(max(delay, retry_after))

    @staticmethod
    def dead_letter(spider: str, worker: str, url: str | None, payload: bytes | str, request_meta: dict[str, Any],
                    error: str, status: int | None = None, attempts: int | None = None) -> DeadLetter:
        now = time.time()
        return DeadLetter(
            url=url, spider=spider,
            attempts=attempts if attempts is not None else RetryPolicy.attempts(request_meta),
            status=status, error=error, first_attempt=request_meta.get(meta.FIRST_ATTEMPT, now), last_attempt=now,
            worker=worker, request=payload.decode() if isinstance(payload, bytes) else payload,
        )

    def after_expiry(self, lease: ExpiredLease, spider: str) -> Requeue | DeadLetter | None:
        """What becomes of a lease whose holder died: back to the queue with one more attempt
        counted, or the DLQ after LEASE_MAX_EXPIRIES; None if its payload is not JSON (dropped).

        A lease marked done (its page was over and waited for the store's flush: ExpiredLease.done) goes back
        with nothing counted: its holder died after the page's download and callback, not of them. (A page
        killing the worker that downloads or parses it dies before it is done: its expiries are counted.)"""
        try:
            data = json.loads(lease.payload)
        except ValueError:
            return None
        request_meta = data.setdefault("meta", {})
        if not lease.done:
            request_meta[meta.EXPIRIES] = request_meta.get(meta.EXPIRIES, 0) + 1
            request_meta[meta.ATTEMPTS] = request_meta.get(meta.ATTEMPTS, 0) + 1
        request_meta.setdefault(meta.FIRST_ATTEMPT, lease.taken_at)
        data["dont_filter"] = True
        payload = json.dumps(data, separators=(",", ":"), ensure_ascii=False).encode()
        if request_meta.get(meta.EXPIRIES, 0) > self.max_expiries:
            return DeadLetter(
                url=data.get("url"), spider=spider, attempts=request_meta[meta.ATTEMPTS], status=None,
                error=f"lease expired {request_meta[meta.EXPIRIES]} times (last holder {lease.worker})",
                first_attempt=request_meta[meta.FIRST_ATTEMPT], last_attempt=time.time(), worker=lease.worker,
                request=payload.decode(),
            )
        return Requeue(payload, int(data.get("priority", 0)), str(data.get("url")))
