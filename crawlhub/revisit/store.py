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
    items                     items the page yielded at its last healthy fetch (its quality baseline)
    broken, broken_at         why and when its extraction was last judged broken (crawlhub.extensions.quality)

Written by MongoPipeline's flushes, in bulk with the items (one ``bulk_write``
per flush); read by the refresher and the ``crawlhub recrawl`` / ``schedule``
commands.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

from pymongo import ASCENDING, DeleteOne, UpdateOne
from pymongo.collection import Collection


def record_id(spider: str, fp: str) -> str:
    """A page's status record: ``<spider>:<request fingerprint>``."""
    return f"{spider}:{fp}"


@dataclass
class _PageNews:
    """What a fetch tells the store of one page's record (the page's spider, fingerprint and address)."""

    spider: str
    fp: str
    url: str

    @property
    def id(self) -> str:
        return record_id(self.spider, self.fp)


@dataclass
class StatusUpdate(_PageNews):
    """What one fetch of a page tells the store."""

    domain: str
    request: str
    fetched_at: float
    status: int
    etag: str | None
    last_modified: str | None
    signature: str | None
    interval: float
    changed: bool | None  # None: the first fetch (neither)
    items: int | None = None  # the items the page yielded (crawlhub.extensions.quality: the page's baseline)
    broken: str = ""  # why the page's extraction was judged broken ('' = healthy, or not judged)
    # some of the page's items were quarantined (crawlhub.extensions.quality): they are not in the store, so the page's
    # validators must not let its next fetch answer 304 (a fixed spider, or `crawlhub quarantine requeue`, reads it whole)
    degraded: bool = False
    # the record this fetch's revisit came from, when it is under another fingerprint (the fingerprinter reads the
    # request otherwise since it was written: an upgrade, URL_TRACKING_PARAMS): {fp, fetches, changes, unchanged,
    # first_fetch}. The status moves to this fetch's fingerprint, its counts carried on, and that record goes.
    moved_from: dict[str, Any] | None = None
    # a redirect's target, met through another page's revisit: a record already there keeps its own address and
    # request (the callback it is crawled with), which this fetch's request (the other page's) must not replace
    keep_request: bool = False

    def operation(self) -> UpdateOne:
        fields: dict[str, Any] = {
            "spider": self.spider, "fp": self.fp, "url": self.url, "domain": self.domain, "request": self.request,
            "last_fetch": self.fetched_at, "last_status": self.status, "interval": self.interval,
            "next_fetch": self.fetched_at + self.interval,
        }
        if self.broken:
            # a broken extraction: no validators and no signature (the next fetch is a whole GET that a fixed
            # spider parses again), the page's item count and its interval as they were (it stays due)
            fields.update(broken=self.broken, broken_at=self.fetched_at)
            if self.items is not None:  # (a baseline handed on: a moved page's, to its new address's record)
                fields["items"] = self.items
            unset = {"etag": "", "last_modified": "", "signature": ""}
        else:
            unset = {"broken": "", "broken_at": ""}
            if self.degraded:  # (kept in the record: the next fetch, healthy, clears the page's quarantine records)
                fields["degraded"] = True
                unset.update(etag="", last_modified="", signature="")
            elif self.status != 304:  # a 304 keeps the stored body's validators and signature
                fields.update(etag=self.etag, last_modified=self.last_modified, signature=self.signature)
            if self.items is not None:
                fields["items"] = self.items
            if not self.degraded:
                unset["degraded"] = ""
        unset["redirected_to"] = ""  # answered at its own address (again)
        counts = {"fetches": 1}
        if self.changed is not None:
            counts["changes" if self.changed else "unchanged"] = 1
        if self.moved_from is not None:  # the old record's counts and one more, and never below what is there
            old = self.moved_from
            carried = {name: int(old.get(name) or 0) + counts.get(name, 0) for name in ("fetches", "changes", "unchanged")}
            return UpdateOne({"_id": self.id}, {"$set": fields, "$unset": unset, "$max": carried,
                                               "$min": {"first_fetch": old.get("first_fetch") or self.fetched_at}},
                             upsert=True)
        on_insert: dict[str, Any] = {"first_fetch": self.fetched_at}
        if self.keep_request:
            on_insert.update((name, fields.pop(name)) for name in ("url", "domain", "request"))
        return UpdateOne({"_id": self.id}, {"$set": fields, "$unset": unset, "$inc": counts,
                                           "$setOnInsert": on_insert}, upsert=True)

    def operations(self) -> list[UpdateOne | DeleteOne]:
        """The write, and the deletion of the record it moved from (if any)."""
        if self.moved_from is None:
            return [self.operation()]
        return [self.operation(), DeleteOne({"_id": record_id(self.spider, self.moved_from["fp"])})]


@dataclass
class Redirected(_PageNews):
    """A revisit of a page that now redirects to another page: what its record keeps.

    The record stays under the page's own fingerprint and address (a site that takes the redirect back has its
    page back), with the redirect's status and where it leads (``redirected_to``). A permanent redirect (301, 308)
    also ends its validators and body signature (they were the old body's: the next fetch is a whole GET); a
    temporary one leaves them. ``interval``: when it is checked again (crawlhub.downloadermiddlewares.revisit)."""

    to: str
    status: int | str  # (Scrapy's redirect reason: a status, or "meta refresh")
    fetched_at: float
    interval: float
    permanent: bool = True

    def operation(self) -> UpdateOne:
        update: dict[str, Any] = {
            "$set": {"redirected_to": self.to, "last_fetch": self.fetched_at, "last_status": self.status,
                     "interval": self.interval, "next_fetch": self.fetched_at + self.interval},
            "$inc": {"fetches": 1, "changes": 1} if self.permanent else {"fetches": 1}}
        if self.permanent:
            update["$unset"] = {"etag": "", "last_modified": "", "signature": ""}
        return UpdateOne({"_id": self.id}, update)  # (no upsert: a record deleted meanwhile, by a reset, stays gone)


@dataclass
class QuarantineSuperseded:
    """A page's fetch supersedes the quarantine records of its earlier fetches (another lease's): the quarantine holds
    what the page's latest extraction could not store, not one copy per revisit, and a page read healthy again leaves
    none. Recorded when the page's lease ends, after its items and records of this fetch are stored."""

    url: str
    lease: str

    def clear(self, collection: Collection[dict[str, Any]], spider: str | None) -> int:
        """``url``: the page as leased (a record's ``page``: the request's URL, a redirect's target or not)."""
        return int(collection.delete_many({"page": self.url, "spider": spider, "lease": {"$ne": self.lease}}).deleted_count)


@dataclass
class GoneCheck:
    """A page fetched again: its items not seen in this fetch (or all, when it now answers 404/410) are gone.

    Recorded when the page's lease ends, so its items are already stored: an item of the page that is still
    there has ``last_seen`` after ``fetched_at``. Items are marked (``gone_at``), never deleted; an item
    seen again loses its mark when it is stored."""

    url: str
    fetched_at: float
    everything: bool = False  # 404/410: every item of the page is gone
    # why the page's items must not be marked ('' = mark): its extraction was judged broken or some of its
    # items were quarantined (they were not stored again, so their last_seen says nothing)
    skip: str = ""

    # REVISIT_GONE_DELAY: the items wait this many seconds before they are gone (0: marked now). Meanwhile they
    # carry ``missing_since`` (this check's time) and ``gone_due``; stored again, they lose both (MongoWriter);
    # still unseen at ``gone_due``, they are marked (confirm, by any worker of a spider that waits)
    delay: float = 0.0

    def mark(self, collection: Collection[dict[str, Any]], now: datetime) -> int:
        if self.skip:
            return 0
        query: dict[str, Any] = {"source_url": self.url, "gone_at": None}
        if not self.everything:
            query["last_seen"] = {"$lt": datetime.fromtimestamp(self.fetched_at, timezone.utc)}
        if self.delay <= 0:
            return int(collection.update_many(query, {"$set": {"gone_at": now}, "$unset": {"gone_due": ""}}).modified_count)
        query["gone_due"] = None  # an item already waiting keeps its due time (a later miss does not defer it)
        waiting = {"missing_since": now, "gone_due": now + timedelta(seconds=self.delay)}
        return int(collection.update_many(query, {"$set": waiting}).modified_count)

    @staticmethod
    def confirm(collection: Collection[dict[str, Any]], now: datetime) -> int:
        """Mark gone the items whose wait ended unseen (``gone_due`` passed); how many. Their ``gone_at`` is when the
        wait ended, not this look's time: from then on an export already counts them gone (:func:`crawlhub.export.plan`),
        and a delta taken since then must not carry them a second time. (An update with a pipeline: MongoDB 4.2+.)"""
        return int(collection.update_many({"gone_due": {"$lte": now}, "gone_at": None},
                                          [{"$set": {"gone_at": "$gone_due"}}, {"$unset": "gone_due"}]).modified_count)


class DueScanner:
    """Walks the due pages back from the present, in windows of due times of about one batch each.

    One query for "everything due, oldest first" costs as much as the pages it matches (a server sorts them;
    SecantusDB even fetches them all, about 40 us each: a minute per batch with a million due). A window costs
    what it holds: it halves while it holds a full batch and widens while it holds less (fourfold when empty,
    so the years before the first fetch are crossed in a few steps). A pass goes from now back to where the
    last pass began (less CLOCK_MARGIN, for a clock that runs behind); the first pass, and one every RESCAN
    seconds or after an error, goes back to the beginning. Due times are only ever set to the present or
    later (a fetch, `recrawl`, a sitemap's lastmod, the refresher), so nothing lands behind a finished pass.
    """

    CLOCK_MARGIN = 300.0
    RESCAN = 600.0
    FIRST_WIDTH = 10.0

    def __init__(self, store: StatusStore, spider: str, batch: int) -> None:
        self.store, self.spider, self.batch = store, spider, batch
        self.reset()

    def reset(self) -> None:
        self.floor = 0.0  # every due time at or below this was seen by a finished pass
        self.high: float | None = None  # the pass in progress: the top of its next window
        self.top = 0.0  # where the pass in progress began
        self.width = self.FIRST_WIDTH
        self.started = time.monotonic()

    def next_batch(self, now: float) -> list[dict[str, Any]]:
        if time.monotonic() - self.started > self.RESCAN:
            self.reset()
        if self.high is None:
            self.high = self.top = now
        while True:
            low = max(self.floor, self.high - self.width)
            docs = self.store.due(self.spider, self.high, self.batch, since=low)
            if len(docs) >= self.batch:  # a full window: these first, a narrower one next time
                self.width = max(0.001, self.width / 2)
                return docs
            if low <= self.floor:  # the pass is over
                self.floor, self.high, self.width = max(0.0, self.top - self.CLOCK_MARGIN), None, self.FIRST_WIDTH
                return docs
            self.high, self.width = low, self.width * (2 if docs else 4)
            if docs:
                return docs

    @property
    def caught_up(self) -> bool:
        """No pass in progress: every page due when the last one began was read."""
        return self.high is None


class StatusStore:
    def __init__(self, collection: Collection[dict[str, Any]]) -> None:
        self.collection = collection
        self._indexed = False

    @classmethod
    def of(cls, client: Any, settings: Any) -> StatusStore:
        """The store in MONGO_DATABASE's STATUS_COLLECTION, through ``client``."""
        return cls(client[settings.get("MONGO_DATABASE")][settings.get("STATUS_COLLECTION") or "url_status"])

    def ensure_indexes(self) -> None:
        if not self._indexed:
            self.collection.create_index([("spider", ASCENDING), ("next_fetch", ASCENDING)], name="due")
            self._indexed = True

    def write(self, updates: list[StatusUpdate]) -> int:
        """One bulk write; the last update of a page in the batch wins (a move to its fingerprint kept)."""
        if not updates:
            return 0
        self.ensure_indexes()
        last: dict[tuple[str, str], Any] = {}
        for update in updates:
            key = (type(update).__name__, update.id)
            before = last.get(key)
            if isinstance(before, StatusUpdate) and before.moved_from and not update.moved_from:
                update.moved_from = before.moved_from  # the page's record still moves (the other fetch: its link)
            last[key] = update
        ops: list[Any] = []
        for update in last.values():  # a StatusUpdate may move a record (two operations); a sitemap's lastmod is one
            ops += update.operations() if isinstance(update, StatusUpdate) else [update.operation()]
        self.collection.bulk_write(ops, ordered=False)
        return len(last)

    def record_state(self, spider: str, fp: str) -> str | None:
        """None: the page of this fingerprint has no record; else why its extraction is judged broken ('' = it is
        not)."""
        doc = self.collection.find_one({"_id": record_id(spider, fp)}, {"broken": 1})
        return None if doc is None else str(doc.get("broken") or "")

    def due(self, spider: str, now: float, limit: int, since: float | None = None) -> list[dict[str, Any]]:
        """The pages due by ``now``: most overdue first, or (``since``) those due from ``since`` on, in any order."""
        self.ensure_indexes()
        when: dict[str, float] = {"$lte": now} if since is None else {"$gte": since, "$lte": now}
        found = self.collection.find({"spider": spider, "next_fetch": when},
                                     {"url": 1, "fp": 1, "domain": 1, "request": 1, "etag": 1, "last_modified": 1,
                                      "signature": 1, "interval": 1, "next_fetch": 1, "items": 1, "broken": 1,
                                      "degraded": 1,
                                      "fetches": 1, "changes": 1, "unchanged": 1, "first_fetch": 1})
        if since is None:
            found = found.sort("next_fetch", ASCENDING)
        return list(found.limit(limit))

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
            query["url"] = {"$regex": "^" + re.escape(prefix)}
        if older_than is not None:
            query["last_fetch"] = {"$lt": now - older_than}
        # due times 10 ms apart per 500 pages: the refresher's scan can cut them into batches (one due time
        # for a million pages would make each of its windows a query over all of them)
        ids = [d["_id"] for d in self.collection.find(query, {"_id": 1})]
        made = 0
        for n, start in enumerate(range(0, len(ids), 500)):
            chunk = ids[start:start + 500]
            made += self.collection.update_many({"_id": {"$in": chunk}, "next_fetch": {"$gt": now}},
                                                {"$set": {"next_fetch": now + n * 0.01}}).modified_count
        return made

    def schedule(self, spider: str, now: float | None = None) -> dict[str, Any]:
        """`crawlhub schedule`: what is due when, how fresh the pages are, changes and unchanged fetches, the pages
        whose address redirected elsewhere at their last fetch."""
        now = time.time() if now is None else now
        docs = list(self.collection.find({"spider": spider}, {"next_fetch": 1, "last_fetch": 1, "changes": 1,
                                                               "unchanged": 1, "fetches": 1, "redirected_to": 1}))
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
            "redirected": sum(1 for d in docs if d.get("redirected_to")),  # at their last fetch (docs/revisit.md)
            **self.missing_items(spider),
        }

    def missing_items(self, spider: str) -> dict[str, Any]:
        """The spider's items that a revisit found missing and that wait (REVISIT_GONE_DELAY), in every collection
        of the database with the ``gone_due`` index (the item collections), the first due time (ISO, UTC; None when
        none waits), and how many of them waited past it (``missing_overdue``): gone for an export already, marked
        when a worker of the spider runs."""
        db = self.collection.database
        waiting, overdue, first = 0, 0, None
        now = datetime.now(timezone.utc)
        query: dict[str, Any] = {"gone_due": {"$gte": datetime(1970, 1, 1, tzinfo=timezone.utc)}, "spiders": spider}
        for name in db.list_collection_names():
            coll = db[name]
            if name.startswith("system.") or "gone_due" not in coll.index_information():
                continue
            waiting += coll.count_documents(query)
            overdue += coll.count_documents({**query, "gone_due": {"$lte": now}})  # (the indexed field first)
            soonest = coll.find_one(query, {"gone_due": 1}, sort=[("gone_due", ASCENDING)])
            if soonest is not None and (first is None or soonest["gone_due"] < first):
                first = soonest["gone_due"]
        return {"missing": waiting, "missing_overdue": overdue,
                "missing_gone_from": first.replace(tzinfo=timezone.utc).isoformat() if first is not None else None}
