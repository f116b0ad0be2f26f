"""The URL status store: one MongoDB document per fetched URL of a spider (the cold side of the frontier).

Collection STATUS_COLLECTION (``url_status``), ``_id`` ``<spider>:<fingerprint>``::

    spider, fp, url, domain   which page
    request                   its request as JSON (what the refresher queues again)
    first_fetch, last_fetch   unix times
    last_status               HTTP status of the last fetch (304 included)
    etag, last_modified       the validators the server sent (conditional GET)
    signature                 SHA-1 of the last body (an unchanged body counts as unchanged)
    interval                  seconds until the next fetch (adaptive, within the policy's bounds)
    next_fetch                unix time the page is due (indexed with spider)
    fetches, changes, unchanged   counts

Written by MongoPipeline's flushes, in bulk with the items (one ``bulk_write``
per flush); read by the refresher and the ``crawlhub recrawl`` / ``schedule``
commands.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from pymongo import ASCENDING, UpdateOne
from pymongo.collection import Collection


@dataclass
class StatusUpdate:
    """What one fetch of a page tells the store."""

    spider: str
    fp: str
    url: str
    domain: str
    request: str
    fetched_at: float
    status: int
    etag: str | None
    last_modified: str | None
    signature: str | None
    interval: float
    changed: bool | None  # None: the first fetch (neither)

    @property
    def id(self) -> str:
        return f"{self.spider}:{self.fp}"

    def operation(self) -> UpdateOne:
        fields: dict[str, Any] = {
            "spider": self.spider, "fp": self.fp, "url": self.url, "domain": self.domain, "request": self.request,
            "last_fetch": self.fetched_at, "last_status": self.status, "interval": self.interval,
            "next_fetch": self.fetched_at + self.interval,
        }
        if self.status != 304:  # a 304 keeps the stored body's validators and signature
            fields.update(etag=self.etag, last_modified=self.last_modified, signature=self.signature)
        counts = {"fetches": 1}
        if self.changed is not None:
            counts["changes" if self.changed else "unchanged"] = 1
        return UpdateOne({"_id": self.id}, {"$set": fields, "$inc": counts,
                                           "$setOnInsert": {"first_fetch": self.fetched_at}}, upsert=True)


@dataclass
class GoneCheck:
    """A page fetched again: its items not seen in this fetch (or all, when it now answers 404/410) are gone.

    Recorded when the page's lease ends, so its items are already stored: an item of the page that is still
    there has ``last_seen`` after ``fetched_at``. Items are marked (``gone_at``), never deleted; an item
    seen again loses its mark when it is stored."""

    url: str
    fetched_at: float
    everything: bool = False  # 404/410: every item of the page is gone

    def mark(self, collection: Collection[dict[str, Any]], now: datetime) -> int:
        query: dict[str, Any] = {"source_url": self.url, "gone_at": None}
        if not self.everything:
            query["last_seen"] = {"$lt": datetime.fromtimestamp(self.fetched_at, timezone.utc)}
        return int(collection.update_many(query, {"$set": {"gone_at": now}}).modified_count)


class StatusStore:
    def __init__(self, collection: Collection[dict[str, Any]]):
        self.collection = collection
        self._indexed = False

    def ensure_indexes(self) -> None:
        if not self._indexed:
            self.collection.create_index([("spider", ASCENDING), ("next_fetch", ASCENDING)], name="due")
            self._indexed = True

    def write(self, updates: list[StatusUpdate]) -> int:
        """One bulk write; the last update of a page in the batch wins."""
        if not updates:
            return 0
        self.ensure_indexes()
        last = {(type(u).__name__, u.id): u for u in updates}
        self.collection.bulk_write([u.operation() for u in last.values()], ordered=False)
        return len(last)

    def due(self, spider: str, now: float, limit: int) -> list[dict[str, Any]]:
        """The pages due by ``now``, most overdue first."""
        self.ensure_indexes()
        found = self.collection.find({"spider": spider, "next_fetch": {"$lte": now}},
                                     {"url": 1, "fp": 1, "domain": 1, "request": 1, "etag": 1, "last_modified": 1,
                                      "signature": 1, "interval": 1, "next_fetch": 1})
        return list(found.sort("next_fetch", ASCENDING).limit(limit))

    def queued(self, moved: list[tuple[str, float]], now: float, again_after: float) -> None:
        """The refresher queued these (id, due time): due again only if the revisit is lost (after ``again_after``).

        The filter on the due time leaves a page alone that was fetched in between (its fetch set a new one)."""
        if moved:
            self.collection.bulk_write([UpdateOne({"_id": doc_id, "next_fetch": due},
                                                  {"$set": {"next_fetch": now + again_after, "queued_at": now}})
                                        for doc_id, due in moved], ordered=False)

    def make_due(self, spider: str, prefix: str | None = None, older_than: float | None = None,
                 now: float | None = None) -> int:
        """`crawlhub recrawl`: pages due now (all, under a URL prefix, or fetched more than ``older_than`` s ago)."""
        now = time.time() if now is None else now
        query: dict[str, Any] = {"spider": spider, "next_fetch": {"$gt": now}}
        if prefix:
            query["url"] = {"$regex": "^" + _escape(prefix)}
        if older_than is not None:
            query["last_fetch"] = {"$lt": now - older_than}
        return int(self.collection.update_many(query, {"$set": {"next_fetch": now}}).modified_count)

    def schedule(self, spider: str, now: float | None = None) -> dict[str, Any]:
        """`crawlhub schedule`: what is due when, how fresh the pages are, changes and unchanged fetches."""
        now = time.time() if now is None else now
        docs = list(self.collection.find({"spider": spider}, {"next_fetch": 1, "last_fetch": 1, "changes": 1,
                                                               "unchanged": 1, "fetches": 1}))
        ages = sorted(now - d.get("last_fetch", now) for d in docs)

        def pct(p: float) -> float | None:
            return round(ages[min(len(ages) - 1, int(p * len(ages)))], 1) if ages else None

        due_in = [d.get("next_fetch", float("inf")) - now for d in docs]
        return {
            "spider": spider, "urls": len(docs),
            "due_now": sum(1 for s in due_in if s <= 0),
            "due_next_hour": sum(1 for s in due_in if 0 < s <= 3600),
            "due_next_day": sum(1 for s in due_in if 3600 < s <= 86400),
            "age_seconds": {"p50": pct(0.5), "p90": pct(0.9), "max": round(ages[-1], 1) if ages else None},
            "fetches": sum(d.get("fetches", 0) for d in docs),
            "changes": sum(d.get("changes", 0) for d in docs),
            "unchanged": sum(d.get("unchanged", 0) for d in docs),
        }


def _escape(text: str) -> str:
    import re

    return re.escape(text)
