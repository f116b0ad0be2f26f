"""Steering a crawl from outside (what the ``crawlhub`` command does): pause, budget, dead letters, reset.

Plain functions over a Redis client and a spider's :class:`Keys`; the CLI
is a thin layer that prints their results.
"""

from __future__ import annotations

import hashlib
import json
import time
from typing import Any

import redis

from crawlhub import meta
from crawlhub._utils.urls import domain_of
from crawlhub.frontier import epoch
from crawlhub.frontier.keys import Keys
from crawlhub.frontier.operations import queued_per_domain
from crawlhub.frontier.partitions import Partitions
from crawlhub.frontier.records import DeadLetter
from crawlhub.seeds import push_seeds


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
    """Every dead letter of every partition, newest first, with its raw form (to remove exactly that one)."""
    pipe = server.pipeline(transaction=False)
    for part in keys.parts:
        pipe.lrange(part.dlq, 0, -1)
    letters = [(raw, DeadLetter.from_json(raw)) for found in pipe.execute() for raw in found]
    if keys.partitions > 1:
        letters.sort(key=lambda pair: -pair[1].last_attempt)
    return letters


def requeue_dead_letter(server: redis.Redis, keys: Keys, raw: bytes | str, letter: DeadLetter) -> bool:
    """Put a dead letter's request back in its domain's queue, its attempts forgotten.

    First queued, then removed from the DLQ: a crash in between leaves a duplicate letter, never a lost one.
    """
    requeue(server, keys, letter.request, letter.url)
    # a letter is in its domain's partition; every partition is looked at, first match removed
    return any(server.lrem(part.dlq, 1, raw) for part in keys.parts)  # type: ignore[arg-type]  # bytes are fine


def requeue(server: redis.Redis, keys: Keys, request_json: str | bytes, url: str | None = None) -> None:
    """Put a request (its JSON, as the frontier holds requests) in its domain's queue, never filtered as a duplicate and
    with its attempts forgotten: a dead letter's, or a quarantined item's page's (``crawlhub quarantine requeue``)."""
    request: dict[str, Any] = json.loads(request_json)
    request_meta = request.get("meta", {})
    for key in (meta.ATTEMPTS, meta.FIRST_ATTEMPT, meta.EXPIRIES):
        request_meta.pop(key, None)
    request["dont_filter"] = True
    payload = json.dumps(request, separators=(",", ":"), ensure_ascii=False)
    Partitions(server, keys).push(payload, int(request.get("priority", 0)), domain_of(url or request.get("url", "")))


def entry_id(raw: bytes | str) -> str:
    """A stable name for one dead letter or bad seed (its record's digest): a list shown a moment ago
    still names the same entry after others came or went, where an index would not."""
    return hashlib.sha1(raw if isinstance(raw, bytes) else raw.encode()).hexdigest()[:16]


def bad_seeds(server: redis.Redis, keys: Keys, limit: int = -1) -> list[tuple[bytes, dict[str, Any]]]:
    """The seeds the spider refused, newest first, each with its raw record."""
    found: list[bytes] = server.lrange(keys.bad_seeds, 0, limit - 1 if limit > 0 else -1)  # type: ignore[assignment]
    return [(raw, json.loads(raw)) for raw in found]


def requeue_bad_seed(server: redis.Redis, keys: Keys, raw: bytes) -> bool:
    """Push a refused seed back to the seeds as it was given (after the spider or its settings were fixed),
    first pushed, then taken off the list (a crash in between leaves it in both, never in neither)."""
    push_seeds(server, keys.seeds, [json.loads(raw)["seed"]])
    return bool(server.lrem(keys.bad_seeds, 1, raw))  # type: ignore[arg-type]  # bytes are fine


def existing_keys(server: redis.Redis, keys: Keys) -> list[str]:
    """The spider's named keys plus every partition's, and the per-domain queues, filter buckets, per-domain
    politeness state (partitioned) and per-minute stats that exist now."""
    prefixes = list(keys.prefixes())
    names = list(keys.names().values())
    for part in keys.parts:
        prefixes += part.prefixes()
        names += part.names()
        if part.tag:
            prefixes.append(part.domain.rstrip(":"))
    found = [k.decode() for prefix in prefixes for k in server.scan_iter(prefix + ":*", count=1000)]
    return list(dict.fromkeys(names + found))


def reset(server: redis.Redis, keys: Keys) -> int:
    """Delete the spider's whole crawl state and move its epoch (when a worker ever made one), so that running
    workers drop their local copies of it (crawlhub/frontier/epoch.py); returns the keys deleted."""
    names = [name for name in existing_keys(server, keys) if name != keys.epoch]
    deleted = sum(int(server.delete(*names[i:i + 1000])) for i in range(0, len(names), 1000))
    if server.exists(keys.epoch):  # workers may know the frontier: a new epoch tells them (none ran: nothing to tell)
        epoch.move(server, keys, "reset")
    return deleted
