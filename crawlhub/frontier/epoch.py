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
import time
import uuid
from dataclasses import asdict, dataclass
from typing import Literal

import redis

from crawlhub.frontier.keys import Keys


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
