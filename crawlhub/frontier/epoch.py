"""The frontier's epoch: how every worker learns that the shared frontier was reset, or vanished.

``<spider>:epoch`` holds ``{"id", "why", "at"}`` (JSON). The first worker of a
frontier makes it (``why: "created"``); ``crawlhub reset`` makes a new one
(``why: "reset"``) after deleting the crawl state. Every worker reads it with
each round that leases, in the same call (tick.lua for one partition, the
round's first pipeline when partitioned): no extra round trip. What a worker
makes of what it reads (:func:`judge`):

* the one it knows: nothing changed;
* another, made by a reset (or any operation that moves it): the shared state
  its local copies mirror was replaced, so it drops them (the local link
  filter, the budget-used mark) and goes on;
* none, or one made as "created" under a worker that knew another: the
  frontier **vanished** (Redis restarted without its data, a FLUSHALL, a
  failover to an empty replica). Its queue, duplicate filter and leases are
  gone; the worker says so loudly and does not call it a finished crawl
  (docs/frontier.md, "When the frontier vanishes").
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from dataclasses import asdict, dataclass
from typing import Literal

import redis

from crawlhub.connection import REDIS_ERRORS
from crawlhub.frontier.keys import Keys

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Epoch:
    id: str
    why: str  # "created" (a frontier's first worker) or the operation that moved it ("reset")
    at: float

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))

    @classmethod
    def parse(cls, raw: str | bytes | None) -> Epoch | None:
        """The epoch a stored value names; None when there is none (or it is not ours)."""
        if not raw:
            return None
        try:
            data = json.loads(raw)
            return cls(str(data["id"]), str(data["why"]), float(data["at"]))
        except (ValueError, KeyError, TypeError):
            return None

    @classmethod
    def new(cls, why: str) -> Epoch:
        return cls(uuid.uuid4().hex[:16], why, time.time())


def claim(server: redis.Redis, keys: Keys) -> str:
    """The frontier's epoch as stored (made, "created", when there is none): what a starting worker knows."""
    server.set(keys.epoch, Epoch.new("created").to_json(), nx=True)
    raw = server.get(keys.epoch)
    return raw.decode() if isinstance(raw, bytes) else str(raw or "")


def move(server: redis.Redis, keys: Keys, why: str) -> Epoch:
    """A new epoch (``why``: the operation, e.g. "reset"): every worker drops its copies of the old state."""
    epoch = Epoch.new(why)
    server.set(keys.epoch, epoch.to_json())
    return epoch


def judge(known: str, seen: str | None) -> Literal["same", "moved", "vanished"]:
    """What a round's read of the epoch (``seen``: None = not read, "" = no key) says against ``known``."""
    if seen is None or seen == known:
        return "same"
    epoch = Epoch.parse(seen)
    if epoch is None or epoch.why == "created":
        return "vanished"
    return "moved"


class EpochWatch:
    """The epoch one worker knows, and what each round's read of it means (read with every round that leases)."""

    def __init__(self, server: redis.Redis, keys: Keys, spider: str, worker: str):
        self.server, self.keys, self.spider, self.worker = server, keys, spider, worker
        self.known = claim(server, keys)  # the epoch's JSON as this worker last read it

    @property
    def id(self) -> str:
        known = Epoch.parse(self.known)
        return known.id if known else ""

    def see(self, seen: str | None) -> Literal["same", "moved", "vanished"]:
        """A round read ``seen``: "moved" (a reset: said at INFO), "vanished" (said loudly, recorded in
        ``<spider>:incidents`` and made anew, so that every other worker finds it changed too), or "same"."""
        verdict = judge(self.known, seen)
        if verdict == "same" or seen is None:  # (None: not read this round; judge says "same", mypy wants a str)
            return "same"
        self.known = seen
        if verdict == "moved":
            moved = Epoch.parse(seen)
            logger.info("The frontier of %s was replaced (%s at %s): this worker dropped its local link filter "
                        "and goes on with the new one", self.spider, moved.why if moved else "?",
                        time.strftime("%H:%M:%S", time.localtime(moved.at)) if moved else "?")
            return "moved"
        if not seen:
            self.known = claim(self.server, self.keys)
        return "vanished"

    def lost(self, held: int) -> str:
        """Say that the frontier vanished (one ERROR, an incident record); why, for the close."""
        why = (f"the shared frontier of {self.spider} vanished from Redis (its epoch key {self.keys.epoch} is gone "
               "or made anew): its queue, duplicate filter and leases are lost")
        logger.error("%s. Redis restarted without its data (run it with appendonly yes: docs/deploy.md), or its keys "
                     "were deleted. This worker puts back the %d pages it holds and stops (close reason "
                     "frontier_lost); pages that were only queued are lost: seed the crawl again (`crawlhub seeds`) "
                     "and restart the workers.", why, held)
        record = json.dumps({"at": time.time(), "worker": self.worker, "what": "frontier vanished",
                             "held_pages": held}, separators=(",", ":"))
        try:
            pipe = self.server.pipeline(transaction=False)
            pipe.lpush(self.keys.incidents, record)
            pipe.ltrim(self.keys.incidents, 0, 99)
            pipe.execute()
        except REDIS_ERRORS as exc:
            logger.warning("Could not record the incident in %s: %s", self.keys.incidents, exc)
        return why
