"""Steering a crawl from outside (what the ``crawlhub`` command does): pause, budget, dead letters, reset.

Plain functions over a Redis client and a spider's :class:`Keys`; the CLI
is a thin layer that prints their results.
"""

from __future__ import annotations

import json
import time
from typing import Any

import redis

from crawlhub import meta
from crawlhub._utils.urls import domain_of
from crawlhub.frontier.keys import Keys
from crawlhub.frontier.operations import FrontierOps, queued_per_domain
from crawlhub.frontier.records import DeadLetter


def pause(server: redis.Redis, keys: Keys) -> None:
    server.set(keys.paused, json.dumps({"at": time.time()}))


def resume(server: redis.Redis, keys: Keys) -> bool:
    """False if it was not paused."""
    return bool(server.delete(keys.paused))


def budget(server: redis.Redis, keys: Keys, default: int, pages: int | None = None, clear: bool = False,
           reset_used: bool = False) -> dict[str, int]:
    """Set (pages), clear or show the cluster-wide budget: {"limit" (0 = none), "used", "queued"}."""
    if clear:
        server.delete(keys.budget)
    elif pages is not None:
        if pages < 0:
            raise ValueError("must be 0 (no limit) or more")
        server.set(keys.budget, pages)
    if reset_used:
        server.delete(keys.budget_used)
    stored = server.get(keys.budget)
    return {"limit": int(stored) if stored is not None else default, "used": int(server.get(keys.budget_used) or 0),
            "queued": sum(queued_per_domain(server, keys).values())}


def dead_letters(server: redis.Redis, keys: Keys) -> list[tuple[bytes | str, DeadLetter]]:
    """Every dead letter, newest first, with its raw form (to remove exactly that one)."""
    return [(raw, DeadLetter.from_json(raw)) for raw in server.lrange(keys.dlq, 0, -1)]


def requeue_dead_letter(server: redis.Redis, keys: Keys, raw: bytes | str, letter: DeadLetter) -> bool:
    """Put a dead letter's request back in its domain's queue, its attempts forgotten.

    First queued, then removed from the DLQ: a crash in between leaves a duplicate letter, never a lost one.
    """
    request: dict[str, Any] = json.loads(letter.request)
    request_meta = request.get("meta", {})
    for key in (meta.ATTEMPTS, meta.FIRST_ATTEMPT, meta.EXPIRIES):
        request_meta.pop(key, None)
    request["dont_filter"] = True
    payload = json.dumps(request, separators=(",", ":"), ensure_ascii=False)
    FrontierOps(server, keys).push(payload, int(request.get("priority", 0)), domain_of(letter.url or request.get("url", "")))
    return bool(server.lrem(keys.dlq, 1, raw))  # type: ignore[arg-type]  # redis-py accepts bytes


def existing_keys(server: redis.Redis, keys: Keys) -> list[str]:
    """The spider's named keys plus the per-domain queues, filter buckets and per-minute stats that exist now."""
    found = [k.decode() for prefix in keys.prefixes() for k in server.scan_iter(prefix + ":*", count=1000)]
    return list(keys.names().values()) + found


def reset(server: redis.Redis, keys: Keys) -> int:
    """Delete the spider's whole crawl state; returns the keys deleted."""
    names = existing_keys(server, keys)
    return int(server.delete(*names)) if names else 0
