"""Typed records of what crosses the frontier's boundaries (Python <-> Lua, frontier <-> Redis lists).

The tick script takes its enqueues and finished downloads as JSON objects
with these field names (``lua/tick.lua``); its reply is a flat array that
:meth:`Tick.from_reply` reads in one place.
"""

from __future__ import annotations

import json
from collections.abc import Container
from dataclasses import asdict, dataclass, field
from typing import Any, NamedTuple


def text(value: bytes | str | int | float) -> str:
    """A Redis reply as text."""
    return value.decode() if isinstance(value, bytes) else str(value)


def lease_domain(lease_id: str) -> str:
    """A lease id is ``<seq>@<queue>`` (``<seq>s@<queue>``: leased while its domain was slowed): its queue (its
    domain, or ``<domain>#<lane>``: crawlhub.roles), without a lookup."""
    return lease_id.partition("@")[2]


def leased_slowed(lease_id: str) -> bool:
    """Whether the lease was leased while its domain was slowed (``<seq>s@<queue>``): its success brings the pace
    back (lua/_policy.lua's finish reads the same mark)."""
    return lease_id.partition("@")[0].endswith("s")


# The fields of one enqueue as the tick script reads them (lua/tick.lua), in order: tab-separated in
# one argument, the payload in the next.
ENQUEUE_ARGV = ("kind", "key", "extra", "priority", "force", "ends", "token", "domain")


class EnqueueOp(NamedTuple):
    """One request for the shared queue (sent with the worker's next tick)."""

    fingerprint: str | bytes  # the request fingerprint (hex or bytes)
    payload: bytes  # the JSON request (crawlhub.frontier.serializer)
    priority: int
    force: bool  # dont_filter: queued even when seen before (recorded as seen too)
    ends_lease: str  # the lease this request replaces (a redirect, the browser fallback), or ""
    domain: str
    # a forced request's id (dont_filter, no lease to end; made once, kept when the request is sent again): a call
    # whose reply was lost (Redis stopped as it answered) and that the worker sends again queues it once
    token: str = ""

    def to_lua(self, spec: list[Any]) -> dict[str, Any]:
        return {"spec": spec, "payload": text(self.payload), "priority": int(self.priority),
                "force": bool(self.force), "ends": self.ends_lease, "token": self.token, "domain": self.domain}

    def to_argv(self, spec: list[Any]) -> list[Any]:
        """The tick script's two arguments for this request: the :data:`ENQUEUE_ARGV` fields joined by
        tabs (the filter's spec as kind, key and extra), then the payload. No JSON to decode per link."""
        extra = spec[2] if len(spec) == 3 and spec[0] != "b" else ",".join(str(x) for x in spec[2:])
        fields = (spec[0], spec[1], extra, int(self.priority), "1" if self.force else "", self.ends_lease,
                  self.token, self.domain)
        return ["\t".join(str(f) for f in fields), self.payload]


class Finish(NamedTuple):
    """A download that is over: its domain's slot frees; ``outcome`` moves the domain's pace."""

    domain: str
    lease_id: str
    outcome: str  # "" (nothing to say), "ok" (a success), "slow" (429/503: slow down)
    retry_after: float = 0.0

    def to_lua(self) -> dict[str, Any]:
        return {"domain": self.domain, "lease": self.lease_id, "outcome": self.outcome,
                "retry_after": self.retry_after}

    def told_by_ack(self, acks: Container[str]) -> bool:
        """Its lease is acked in the same script call, and it has nothing to say but that the slot frees (no
        outcome, or a success of a lease leased at its domain's own pace): the ack frees the slot and wakes the
        domain as the finish would (lua/tick.lua), so the call need not carry it. A slow-down, or a success of
        a lease leased while the domain was slowed (``<seq>s@``: it brings the pace back), is always sent."""
        return (self.outcome != "slow" and bool(self.lease_id) and self.lease_id in acks
                and (self.outcome != "ok" or not leased_slowed(self.lease_id)))


class Taken(NamedTuple):
    """A request leased by this worker."""

    lease_id: str
    payload: bytes


class ExpiredLease(NamedTuple):
    """A lease past its deadline: its holder died or lost Redis."""

    lease_id: str
    worker: str
    taken_at: float
    payload: bytes
    # its page was over (downloaded, its callback's output through the pipelines) and waited for the store's flush
    # when its holder last renewed it: the holder's death is not the page's doing (RetryPolicy.after_expiry)
    done: bool = False


@dataclass
class Tick:
    """What one call to the frontier returned."""

    taken: list[Taken]
    wait: float | None  # seconds until a queued or delayed request may be ready; None = there is none
    added: int = 0  # enqueued requests that were new (or forced)
    acked: int = 0
    budget_exhausted: bool = False
    paused: bool = False
    epoch: str | None = None  # the frontier's epoch as read with this round: None = not read, "" = gone
    # requests queued or delayed that were not ready: True / False as the round saw it, None = it cannot tell
    # (a partitioned round asks only the partitions hinted ready; its ``wait`` may be a hint's)
    waiting: bool | None = None
    # seconds until a request of any lane (not only this worker's) may be ready: a partition's hint
    any_wait: float | None = None

    @classmethod
    def from_reply(cls, out: list[Any]) -> Tick:
        """tick.lua returns {status, wait ('' = none), added, acked, epoch, any lane's wait, id, payload, id,
        payload, ...} (epoch: '' = not read, else 'e' + the key's value)."""
        taken = [Taken(text(out[i]), out[i + 1]) for i in range(6, len(out), 2)]
        epoch = text(out[4]) if len(out) > 4 else ""  # (a reply that stops before it: nothing read)
        wait = float(out[1]) if out[1] else None
        any_wait = float(out[5]) if len(out) > 5 and out[5] else wait
        return cls(taken, wait, int(out[2]), int(out[3]), out[0] == b"budget", out[0] == b"paused",
                   epoch[1:] if epoch else None, waiting=wait is not None, any_wait=any_wait)


@dataclass
class DeadLetter:
    """A request the crawl gave up on, as stored in ``<spider>:dlq`` (JSON)."""

    url: str | None
    spider: str
    attempts: int
    status: int | None
    error: str
    first_attempt: float
    last_attempt: float
    worker: str
    request: str  # the request's JSON: `crawlhub dlq requeue` puts it back
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> str:
        record = asdict(self)
        record.update(record.pop("extra"))
        return json.dumps(record, ensure_ascii=False)

    @classmethod
    def from_json(cls, raw: bytes | str) -> DeadLetter:
        data = json.loads(raw)
        known = {k: data.pop(k, None) for k in ("url", "spider", "attempts", "status", "error", "first_attempt",
                                                 "last_attempt", "worker", "request")}
        return cls(url=known["url"], spider=known["spider"] or "", attempts=int(known["attempts"] or 0),
                   status=known["status"], error=known["error"] or "", first_attempt=float(known["first_attempt"] or 0),
                   last_attempt=float(known["last_attempt"] or 0), worker=known["worker"] or "",
                   request=known["request"] or "", extra=data)
