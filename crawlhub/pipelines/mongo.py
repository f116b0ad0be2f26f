"""MongoPipeline: bulk upserts, one collection per item type, unique keys.

* A unique index on each item type's key (product: site+id, quote: quote_id,
  page: url) makes a second copy of an item impossible, whichever worker or
  run writes it.
* Items are buffered and written with one ``bulk_write`` per collection when
  MONGO_BATCH_SIZE items are waiting, every MONGO_FLUSH_INTERVAL seconds, and
  when the spider closes. Writes run in a thread; a full buffer makes the
  item flow wait for the write (back-pressure, bounded memory).
* Each document carries ``first_seen``, ``last_seen``, ``changed_at`` (when its
  content was last written: stored first or changed), ``content_hash`` and
  ``spiders`` (the spiders that stored it, so status counts and ``crawlhub
  export`` find a spider's items). A re-crawl of an unchanged item only moves
  ``last_seen``; a changed one is rewritten. ``cycles`` (``{spider: epoch
  id}``) names the frontier epoch in which each spider last stored it: a
  document entering the current epoch is counted once, cluster-wide, and
  sent as ``crawlhub.signals.items_stored`` (the ``items`` of ``crawlhub
  status``, which so equals the store).
* Items that ValidatePipeline rejected go to MONGO_QUARANTINE_COLLECTION with
  the reasons and the source URL; so does a document MongoDB refuses (over
  16 MB, a key it cannot store): described (long fields cut, their length
  said) with MongoDB's reason, while the rest of its batch is written and
  acked.
* The store's handshake with the frontier (``store_link_of(crawler)``, a
  :class:`~crawlhub.frontier.view.StoreLink`: a flush takes the leases done
  before it began, ``flush_succeeded`` or ``flush_failed`` hands them back): a
  page's lease is released only once its items are written. The URL status
  store's news come by signal (``crawlhub.signals.status_observed``) into this
  pipeline's own buffer, written with the next flush.
* If MongoDB cannot be reached the batch is kept and retried on the next
  flush, with backoff; when MONGO_BUFFER_MAX items are waiting, the item flow
  waits for MongoDB (the worker takes no new pages meanwhile), so memory stays
  bounded and unstored pages keep their leases. At close, after MONGO_CLOSE_RETRIES failed tries, what is left is
  written to a JSON-lines file under CRAWLHUB_HOME/unsaved/ and the log says
  where.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections import defaultdict
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

import bson
from bson.errors import InvalidDocument
from itemadapter import ItemAdapter
from pymongo import ASCENDING, MongoClient, UpdateOne
from pymongo.collection import Collection
from pymongo.database import Database
from pymongo.errors import BulkWriteError, ConnectionFailure, OperationFailure
from scrapy import Spider, signals
from scrapy.crawler import Crawler
from scrapy.http import Response
from scrapy.utils.defer import deferred_from_coro, maybe_deferred_to_future
from twisted.internet import task, threads
from twisted.internet.defer import DeferredLock

from crawlhub import services
from crawlhub import signals as crawlhub_signals
from crawlhub.components import frontier_of
from crawlhub.config import redact_url
from crawlhub.connection import get_mongo, mongo_error
from crawlhub.exceptions import InvalidItem
from crawlhub.frontier.view import StoreLink, store_link_of
from crawlhub.items import (
    BOOKKEEPING_FIELDS,
    VOLATILE_FIELDS,
    ItemMeta,
    counts_as_gone,
    cycle_field,
    is_empty,
    item_meta,
)
from crawlhub.meta import LEASE, LEASE_PAYLOAD, stored_request_data
from crawlhub.revisit.policy import RevisitPolicy
from crawlhub.revisit.store import GoneCheck, QuarantineSuperseded, StatusStore

if TYPE_CHECKING:
    from typing_extensions import Self

logger = logging.getLogger(__name__)

DUPLICATE_KEY = 11000
# MongoDB's 16 MiB BSON limit, less room for the update's operators
MAX_DOCUMENT_BYTES = 16 * 1024 * 1024 - 64 * 1024


def content_hash(doc: dict[str, Any]) -> str:
    stable = {k: v for k, v in doc.items() if k not in VOLATILE_FIELDS}
    return hashlib.sha1(json.dumps(stable, sort_keys=True, default=str).encode()).hexdigest()


def stored_fields(document: dict[str, Any]) -> dict[str, Any]:
    """A stored document's item fields (without what the store adds)."""
    return {name: value for name, value in document.items() if name not in BOOKKEEPING_FIELDS}


def key_filter(meta: ItemMeta, doc: dict[str, Any]) -> dict[str, Any]:
    return {name: doc.get(name) for name in meta.key_fields}


INDEX_OPTIONS_CONFLICT, INDEX_KEY_SPECS_CONFLICT = 85, 86  # an index on those keys exists under another name
# the fields a delta export leads its queries with (indexed with each item collection): none moves on an unchanged store
DELTA_FIELDS = ("changed_at", "gone_at", "gone_due")
# what an item stored again loses: a revisit's finding that it went (GoneCheck), or that it may have
UNSEEN = {"gone_at": "", "missing_since": "", "gone_due": ""}


def leased_page(response: Response | None) -> dict[str, Any]:
    """What a quarantine record keeps of the fetch ``response`` answers: ``request`` (the leased request's JSON as the
    frontier queues it again, ``crawlhub quarantine requeue``), ``page`` (its URL: a redirect's target is still its
    page) and ``lease``; {} for a page the frontier did not lease."""
    request = response.request if response is not None else None
    lease = request.meta.get(LEASE) if request is not None else None
    if request is None or not lease:
        return {}
    try:
        stored = stored_request_data(request.meta[LEASE_PAYLOAD])
    except (KeyError, TypeError, ValueError):  # no payload, or not JSON: nothing to queue again
        return {"request": None, "page": request.url, "lease": lease}
    return {"request": json.dumps(stored, separators=(",", ":"), ensure_ascii=False),
            "page": stored.get("url") or request.url, "lease": lease}


class MongoWriter:
    """The synchronous part: runs in a thread, knows nothing of Scrapy."""

    def __init__(self, db: Database[Any], quarantine: str, spider: str | None = None, status_collection: str = "url_status",
                 changes_collection: str = "changes") -> None:
        self.db = db
        self.quarantine = quarantine
        self.spider = spider
        self.status_collection = status_collection
        self.changes_collection = changes_collection  # "" = no change history
        self.indexed: set[str] = set()
        self._collections: set[str] = set()  # item collections found in the database (item_collections)
        self._collections_at = float("-inf")
        self.cycle = ""  # the epoch of the flush being written (write)
        self.changes: list[dict[str, Any]] = []  # the last write's change history
        # (collection, field): the revisits' indexes made (_index). A collection dropped under a running worker gets
        # them again at the worker's next start; meanwhile its checks are slower, not wrong
        self.revisit_indexes: set[tuple[str, str]] = set()

    def ensure_index(self, meta: ItemMeta) -> None:
        if meta.collection in self.indexed:
            return
        self.db[meta.collection].create_index(
            [(name, ASCENDING) for name in meta.key_fields], unique=True, name="item_key"
        )
        self.db[meta.collection].create_index("spiders", name="spiders")  # `crawlhub status`, export
        for name in DELTA_FIELDS:  # what `export --since` reads (crawlhub.export.delta_clauses); rarely written
            self._index(meta.collection, name)
        if self.spider:  # status' count of this crawl's documents (crawlhub.monitor.status.item_counts)
            self.db[meta.collection].create_index(cycle_field(self.spider), name=cycle_field(self.spider))
        self.indexed.add(meta.collection)

    def write(self, batch: list[tuple[ItemMeta, dict[str, Any]]], quarantined: list[dict[str, Any]], statuses: list[Any] | None = None,
              epoch: str = "", confirm: bool = False) -> dict[str, Any]:
        """Write one flush. ``epoch``: the frontier epoch the spider's crawl is in ("" = none); ``counts["cycle"]``
        is then the number of documents stored for the first time in it (each counted once, whichever worker
        stores it and however often: the ``cycles`` field, ``{spider: epoch}``, moves once per document).
        ``confirm``: then mark gone the items whose wait ended (confirm_gone), after this flush's items."""
        counts: dict[str, int] = defaultdict(int)
        self.cycle = epoch if self.spider else ""
        self.changes = []  # this write's change history (crawlhub.signals.items_changed)
        groups: dict[str, dict[tuple[str, ...], tuple[ItemMeta, dict[str, Any]]]] = defaultdict(dict)
        for meta, doc in batch:
            # one write per key in a batch: the last copy wins
            groups[meta.collection][tuple(map(str, key_filter(meta, doc).values()))] = (meta, doc)
        refused: list[dict[str, Any]] = []
        for collection, by_key in groups.items():
            items = list(by_key.values())
            try:
                refused += self._upsert(collection, items, counts)
            except InvalidDocument:
                # a document MongoDB cannot take (over 16 MB, a bad key): set it aside, write the rest
                good = []
                for meta, doc in items:
                    reason = self._unstorable(doc)
                    if reason:
                        refused.append(self.refusal(meta, doc, reason))
                    else:
                        good.append((meta, doc))
                if good:
                    refused += self._upsert(collection, good, counts)
        quarantined = [*quarantined, *refused]
        if quarantined:
            self._index(self.quarantine, "spider")  # crawlhub quarantine, status
            self.db[self.quarantine].insert_many(quarantined, ordered=False)
            counts["quarantined"] += len(quarantined)
            counts["refused"] += len(refused)
        superseded = [s for s in statuses or () if isinstance(s, QuarantineSuperseded)]
        if superseded:  # a page's quarantine records of earlier fetches (after this flush's own are in)
            self._index(self.quarantine, "page")
            for news in superseded:
                counts["quarantine_superseded"] += news.clear(self.db[self.quarantine], self.spider)
            statuses = [s for s in statuses or () if not isinstance(s, QuarantineSuperseded)]
        if statuses:  # the URL status store (crawlhub.revisit), after the items: one bulk write per flush
            checks = [s for s in statuses if isinstance(s, GoneCheck)]
            counts["status_updates"] += StatusStore(self.db[self.status_collection]).write(
                [s for s in statuses if not isinstance(s, GoneCheck)])
            now = datetime.now(timezone.utc)
            collections = self.item_collections() if checks else []
            for collection in collections:
                self._index(collection, "source_url")  # a check's query: without it, a scan of the collection
            for check in checks:
                for collection in collections:
                    counts["missing" if check.delay > 0 else "gone"] += check.mark(self.db[collection], now)
        if confirm:
            counts["gone_confirmed"] += self.confirm_gone()
        return dict(counts)

    def confirm_gone(self) -> int:
        """Mark gone, in every item collection, the items whose wait (REVISIT_GONE_DELAY) ended unseen."""
        now = datetime.now(timezone.utc)
        found = 0
        for collection in self.item_collections():
            self._index(collection, "gone_due")
            found += GoneCheck.confirm(self.db[collection], now)
        return found

    def _index(self, collection: str, field: str) -> None:
        """An index on ``field`` (made once per writer and collection; MongoDB keeps one of each). One an operator made
        on the same field under another name serves as well."""
        if (collection, field) not in self.revisit_indexes:
            try:
                self.db[collection].create_index(field, name=field)
            except OperationFailure as exc:
                if exc.code not in (INDEX_OPTIONS_CONFLICT, INDEX_KEY_SPECS_CONFLICT):
                    raise
            self.revisit_indexes.add((collection, field))

    def _enter_cycle(self, coll: Collection[Any], field: str, filters: list[dict[str, Any]]) -> int:
        """Mark these stored documents as stored in this epoch; how many were not yet (a document that another
        worker marked meanwhile does not match: each is counted once)."""
        if not filters:
            return 0
        result = coll.bulk_write([UpdateOne({**flt, field: {"$ne": self.cycle}}, {"$set": {field: self.cycle}})
                                  for flt in filters], ordered=False)
        return int(result.modified_count)

    def item_collections(self) -> list[str]:
        """The database's item collections (those with crawlhub's unique item key), this worker's included."""
        if time.monotonic() - self._collections_at > 60:
            found = set()
            for name in self.db.list_collection_names():
                if name != self.quarantine and not name.startswith(("system.", "_")) and \
                        "item_key" in self.db[name].index_information():
                    found.add(name)
            self._collections, self._collections_at = found, time.monotonic()
        return sorted(self._collections | self.indexed)

    def changed_fields(self, collection: str, key: dict[str, Any], before: dict[str, Any], after: dict[str, Any], now: datetime) -> list[dict[str, Any]]:
        """The change history of one updated item: a record per field whose value moved."""
        skip = {*VOLATILE_FIELDS, *BOOKKEEPING_FIELDS}
        return [{"collection": collection, "key": key, "field": name, "old": before.get(name), "new": after.get(name),
                 "at": now, "url": after.get("source_url"), "spider": self.spider}
                for name in sorted((set(before) | set(after)) - skip) if before.get(name) != after.get(name)]

    @staticmethod
    def _unstorable(doc: dict[str, Any]) -> str:
        """Why MongoDB would refuse ``doc`` ('' if it would not)."""
        try:
            size = len(bson.encode({**doc, "content_hash": "0" * 40, "first_seen": None, "last_seen": None,
                                     "changed_at": None}))
        except InvalidDocument as exc:
            return f"MongoDB cannot store it: {exc}"[:500]
        if size > MAX_DOCUMENT_BYTES:
            return f"document of {size} bytes is over MongoDB's limit of {MAX_DOCUMENT_BYTES}"
        return ""

    def refusal(self, meta: ItemMeta, doc: dict[str, Any], reason: str) -> dict[str, Any]:
        """The quarantine record of a document MongoDB refused: the document described, never too large itself."""
        source = doc.get("source_url") or doc.get("url")
        logger.warning("MongoDB refused %s from %s (%s): quarantined in %s", meta.described(),
                       source or "a page the item does not name (no source_url or url)", reason, self.quarantine)
        return {
            "collection": meta.collection,
            "item": describe(doc),
            "reasons": [reason],
            "source_url": source,
            "spider": self.spider,
            "quarantined_at": datetime.now(timezone.utc),
        }

    def _upsert(self, collection: str, items: list[tuple[ItemMeta, dict[str, Any]]],
                counts: dict[str, int]) -> list[dict[str, Any]]:
        """Upsert ``items``; returns the quarantine records of the documents MongoDB refused.

        ``counts`` moves only for what was written."""
        kinds: list[str] = []  # per op: unchanged, updated or inserted
        meta = items[0][0]
        self.ensure_index(meta)
        coll = self.db[collection]
        filters = [key_filter(meta, doc) for _, doc in items]
        marked = cycle_field(self.spider) if self.cycle and self.spider else ""
        # the stored documents, whole: an item's empty fields never overwrite what they hold
        found_docs = {tuple(str(found.get(n)) for n in meta.key_fields): found for found in coll.find({"$or": filters})}
        changes: list[tuple[int, list[dict[str, Any]]]] = []  # per updated op: what changed
        now = datetime.now(timezone.utc)
        spiders = {"$addToSet": {"spiders": self.spider}} if self.spider else {}  # which spiders stored it
        ops = []
        for (_, doc), flt in zip(items, filters, strict=True):
            before = found_docs.get(tuple(str(v) for v in flt.values()))
            present = {name: value for name, value in doc.items() if not is_empty(value)}  # never over a stored value
            after = doc if before is None else {**stored_fields(before), **present}
            digest = content_hash(after)
            if before is not None and before.get("content_hash") == digest:
                # the same content: seen again, where it is now (its source_url: a product shifted to another
                # listing page is that page's; a revisit of the page it left must not find it there, GoneCheck)
                seen = {"last_seen": now, **{name: present[name] for name in VOLATILE_FIELDS if name in present}}
                if counts_as_gone(before, now):  # back after a gone mark: a delta (export --since) carries it
                    seen["changed_at"] = now
                ops.append(UpdateOne(flt, {"$set": seen, "$unset": UNSEEN, **spiders}))
                kinds.append("unchanged")
            else:
                fields = {**present, "content_hash": digest, "last_seen": now, "changed_at": now}
                on_insert = {**{name: value for name, value in doc.items() if name not in present}, "first_seen": now,
                             **({marked: self.cycle} if marked else {})}
                ops.append(UpdateOne(flt, {"$set": fields, "$unset": UNSEEN, "$setOnInsert": on_insert,
                                           **spiders}, upsert=True))
                kinds.append("updated" if before is not None else "inserted")
                if before is not None and self.changes_collection:
                    changes.append((len(ops) - 1, self.changed_fields(collection, flt, before, after, now)))
        try:
            upserted = set(coll.bulk_write(ops, ordered=False).upserted_ids or ())
        except BulkWriteError as exc:
            upserted = {u["index"] for u in exc.details.get("upserted", [])}
            errors = exc.details.get("writeErrors", [])
            # Another worker inserted the same key between our read and our
            # upsert: the retry matches its document instead of inserting.
            retry = [ops[e["index"]] for e in errors if e.get("code") == DUPLICATE_KEY]
            if retry:
                coll.bulk_write(retry, ordered=False)
                counts["race_retried"] += len(retry)
            # any other error is about that document (too large, failed validation): the rest are written
            refused = [e for e in errors if e.get("code") != DUPLICATE_KEY]
        else:
            refused = []
        failed = {e["index"] for e in refused}
        for index, kind in enumerate(kinds):
            if index not in failed:
                counts[kind] += 1
        if marked:
            name = marked.removeprefix("cycles.")
            counts["cycle"] += len(upserted - failed) + self._enter_cycle(coll, marked, [
                flt for index, flt in enumerate(filters) if index not in failed and index not in upserted
                and (found_docs.get(tuple(str(v) for v in flt.values())) or {}).get("cycles", {}).get(name) != self.cycle])
        history = [record for index, records in changes if index not in failed for record in records]
        if history:
            self.changes += history
            self.db[self.changes_collection].insert_many([dict(r) for r in history], ordered=False)
            counts["changes"] += len(history)
        return [self.refusal(meta, items[e["index"]][1], f"MongoDB refused it: {e.get('errmsg', e)}"[:500])
                for e in refused]


def describe(doc: dict[str, Any], limit: int = 1000) -> dict[str, Any]:
    """``doc`` with every long string or list cut to ``limit`` and its full length said
    (a value BSON cannot hold becomes its repr): small enough to quarantine."""
    out = {}
    for name, value in doc.items():
        try:
            bson.encode({"v": value})
        except InvalidDocument:  # what BSON cannot hold is kept as its repr
            value = repr(value)
        if isinstance(value, (str, bytes)) and len(value) > limit:
            value = f"{value[:limit]!s}... ({len(value)} in all)"
        elif isinstance(value, list) and len(value) > 100:
            value = [*value[:100], f"... ({len(value)} in all)"]
        out[name] = value
    return out


class MongoPipeline:
    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler
        settings = crawler.settings
        self.batch_size = max(1, settings.getint("MONGO_BATCH_SIZE"))
        self.interval = settings.getfloat("MONGO_FLUSH_INTERVAL")
        self.close_retries = settings.getint("MONGO_CLOSE_RETRIES", 5)
        self.buffer_max = max(self.batch_size, settings.getint("MONGO_BUFFER_MAX", 1000))
        self.failures = 0
        self.last_error = ""
        self.retry_at = 0.0  # monotonic time of the next try after a failed write
        self.unreachable = False  # the last failure was MongoDB not answering (not a refused write)
        self.close_timeout = settings.getfloat("MONGO_CLOSE_TIMEOUT", 20.0)
        self.backlog = False
        self.database = settings.get("MONGO_DATABASE")
        self.quarantine_name = settings.get("MONGO_QUARANTINE_COLLECTION")
        self.home = settings.get("CRAWLHUB_HOME")
        self.buffer: list[tuple[ItemMeta, dict[str, Any]]] = []
        self.quarantined: list[dict[str, Any]] = []
        self.statuses: list[Any] = []  # the URL status store's news (status_observed)
        self.gone_delay = 0.0  # REVISIT_GONE_DELAY as the spider's policy has it (open_spider)
        self.confirm_at = 0.0  # monotonic time of the next look for items whose wait ended
        self.lock = DeferredLock()
        self.timer: task.LoopingCall | None = None
        self.client: MongoClient[Any] | None = None
        self.writer: MongoWriter | None = None
        crawler.signals.connect(self.item_dropped, signal=signals.item_dropped)
        crawler.signals.connect(self.status_observed, signal=crawlhub_signals.status_observed)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        return cls(crawler)

    async def open_spider(self) -> None:
        self.client = client = get_mongo(self.crawler.settings)
        self.writer = MongoWriter(client[self.database], self.quarantine_name,
                                  self.crawler.spider.name if self.crawler.spider else None,
                                  self.crawler.settings.get("STATUS_COLLECTION", "url_status"),
                                  self.crawler.settings.get("CHANGES_COLLECTION", "changes"))
        logger.info(
            "Storing items in MongoDB %s, database %r",
            redact_url(services.mongo_uri(self.crawler.settings)), self.database,
        )
        link = store_link_of(self.crawler)
        if link is not None:  # a page's lease ends only after its items are written
            link.opened()
        if self.crawler.spider is not None:  # (a one-shot spider's pages are never checked: it confirms nothing)
            policy = RevisitPolicy.for_spider(self.crawler.spider, self.crawler.settings)
            self.gone_delay = policy.gone_delay if policy.enabled else 0.0
        if self.interval > 0:
            self.timer = task.LoopingCall(lambda: deferred_from_coro(self.flush()))
            self.timer.start(self.interval, now=False)

    async def process_item(self, item: Any) -> Any:
        self.buffer.append((item_meta(item), ItemAdapter(item).asdict()))
        if len(self.buffer) >= self.buffer_max:
            self._set_backlog(True)  # a write is slow or failing: take no new pages
        if len(self.buffer) >= self.batch_size and self._running() and (not self.failures or len(self.buffer) >= self.buffer_max):
            # (while MongoDB fails, the timer retries; an item waits only when the buffer is full;
            # a stopping worker never waits: close_spider writes or saves what is left)
            delay = 0.5
            while not await self.flush() and len(self.buffer) >= self.buffer_max and self._running():
                # MongoDB is down and the buffer is full: the worker takes no new
                # requests, and this item waits for MongoDB (back-pressure), until
                # the worker is told to stop: then close_spider saves what is left
                self._set_backlog(True)
                await _sleep(delay)
                delay = min(delay * 2, 30)
        return item

    def _running(self) -> bool:
        engine = self.crawler.engine
        return engine is None or engine.running

    def _set_backlog(self, full: bool) -> None:
        if full != self.backlog:
            self.backlog = full
            link = store_link_of(self.crawler)
            if link is not None:
                link.backlog(full)
            if full:
                logger.warning("%d items wait for MongoDB: taking no new requests until it is back", len(self.buffer))

    def item_dropped(self, item: Any, response: Response, exception: BaseException, spider: Spider | None=None) -> None:
        if not isinstance(exception, InvalidItem):
            return
        doc = ItemAdapter(item).asdict()
        self.quarantined.append(
            {
                "item_type": type(item).__name__,
                "collection": item_meta(item).collection,
                "item": doc,
                "reasons": exception.reasons,
                "fields": {name or "(item)": reasons for name, reasons in exception.fields.items()},
                "source_url": doc.get("source_url") or (response.url if response is not None else None),
                "spider": self.crawler.spider.name if self.crawler.spider else None,
                "quarantined_at": datetime.now(timezone.utc),
                # the page's request, to crawl it again once the spider or the site is fixed (crawlhub quarantine
                # requeue), the page as leased and that fetch's lease: a later fetch's records supersede these
                # (QuarantineSuperseded)
                **leased_page(response),
            }
        )
        logger.warning(
            "Quarantined a %s from %s: %s", type(item).__name__,
            self.quarantined[-1]["source_url"], "; ".join(exception.reasons),
        )

    async def flush(self, force: bool = False) -> bool:
        """Write what is buffered; True if nothing is left unwritten.

        After a failed write the next try waits for its backoff (0.5 s doubling to 30 s): flushes
        asked for meanwhile (by items, the timer) return False at once instead of each waiting
        for MongoDB's server selection in turn. ``force`` (at close) tries anyway.
        """
        done = await maybe_deferred_to_future(self.lock.run(lambda: deferred_from_coro(self._flush(force))))
        if done and force and self.statuses:
            # at close: what the leases this flush ended still have for the status store (a revisit's gone items)
            done = await maybe_deferred_to_future(self.lock.run(lambda: deferred_from_coro(self._flush(force))))
        return done

    def status_observed(self, updates: list[Any]) -> None:
        """News for the URL status store (crawlhub.signals.status_observed): written with the next flush."""
        self.statuses.extend(updates)

    def _leases(self) -> tuple[StoreLink | None, list[str]]:
        """The store link, and the leases this flush covers (every page done before it began)."""
        link = store_link_of(self.crawler)
        return link, link.flush_started() if link is not None else []

    async def _flush(self, force: bool = False) -> bool:
        if self.failures and not force and time.monotonic() < self.retry_at:
            return False
        link, leases = self._leases()
        statuses, self.statuses = self.statuses, []
        frontier = frontier_of(self.crawler)
        cycle = frontier.epoch_id if frontier is not None else ""
        # items that a revisit found missing and that waited REVISIT_GONE_DELAY unseen: gone (a look every tenth
        # of the wait, 1 to 60 s; any worker of the spider looks, so a worker's death delays no mark)
        confirm = self.gone_delay > 0 and time.monotonic() >= self.confirm_at
        if not self.buffer and not self.quarantined and not statuses and not confirm:
            if link is not None and leases:  # their items were written by earlier flushes
                link.flush_succeeded(leases)
            return True
        # write a snapshot; it leaves the buffers only once it is stored
        batch, quarantined = list(self.buffer), list(self.quarantined)
        started = time.monotonic()
        writer = self.writer
        assert writer is not None  # (opened)
        try:
            counts = await maybe_deferred_to_future(threads.deferToThread(writer.write, batch, quarantined, statuses, cycle,
                                                                          confirm))
        except Exception as exc:  # noqa: BLE001 - MongoDB down, or anything else: keep the batch, never die
            self.statuses[:0] = statuses
            if link is not None:
                link.flush_failed(leases)
            self.failures += 1
            self.last_error = mongo_error(exc)
            self.retry_at = time.monotonic() + min(0.5 * 2 ** (self.failures - 1), 30.0)
            self.unreachable = isinstance(exc, ConnectionFailure)
            self.crawler.stats.inc_value("mongo/write_errors")
            log = logger.error if self.failures == 1 or self.failures % 10 == 0 else logger.debug
            log(
                "MongoDB write of %d items failed (%s); keeping them for the next flush (failure %d in a row)",
                len(batch), self.last_error, self.failures,
            )
            return False
        del self.buffer[: len(batch)]
        del self.quarantined[: len(quarantined)]
        if confirm:
            self.confirm_at = time.monotonic() + min(max(self.gone_delay / 10, 1.0), 60.0)
            if counts.get("gone_confirmed"):
                logger.info("%d items missing from their pages' revisits and not seen elsewhere for %gs "
                            "(REVISIT_GONE_DELAY) are marked gone", counts["gone_confirmed"], self.gone_delay)
        if self.failures:
            logger.info("MongoDB is back after %d failed writes; %d items written", self.failures, len(batch))
        self.failures = 0
        if len(self.buffer) < self.buffer_max:
            self._set_backlog(False)
        if link is not None:
            link.flush_succeeded(leases)
        stats = self.crawler.stats
        for name, value in counts.items():
            stats.inc_value(f"mongo/{name}", value)
        stats.inc_value("mongo/flushes")
        if counts.get("cycle"):
            self.crawler.signals.send_catch_log(crawlhub_signals.items_stored, count=counts["cycle"], epoch=cycle)
        if writer.changes:
            self.crawler.signals.send_catch_log(crawlhub_signals.items_changed, changes=writer.changes)
        logger.debug("Flushed %d items to MongoDB in %.3fs: %s", len(batch), time.monotonic() - started, counts)
        return True

    async def close_spider(self) -> None:
        """Flush what is left: MONGO_CLOSE_RETRIES tries within MONGO_CLOSE_TIMEOUT seconds, then unsaved/."""
        if self.timer is not None and self.timer.running:
            self.timer.stop()
        deadline = time.monotonic() + self.close_timeout
        delay = 1.0
        for attempt in range(1, self.close_retries + 1):
            # under the flush lock: a flush the timer started may still be writing through the old client
            timeout = max(0.5, min(deadline - time.monotonic(), 10.0))
            await maybe_deferred_to_future(self.lock.run(self._reconnect, timeout))
            if await self.flush(force=True):
                break
            left = deadline - time.monotonic()
            if attempt == self.close_retries or left <= delay:
                self._save_unsaved()
                break
            logger.warning("MongoDB flush at close failed (try %d of %d: %s); retrying in %.0fs",
                           attempt, self.close_retries, self.last_error, delay)
            await _sleep(delay)
            delay = min(delay * 2, 30)
        if self.client is not None:
            self.client.close()

    def _reconnect(self, timeout: float) -> None:
        if self.client is not None:
            self.client.close()
        self.client = client = get_mongo(self.crawler.settings, server_selection_timeout_ms=int(timeout * 1000))
        assert self.writer is not None  # (opened)
        self.writer.db = client[self.database]

    def _save_unsaved(self) -> None:
        if not self.buffer and not self.quarantined:
            return
        folder = services.home_dir(self.home) / "unsaved"
        folder.mkdir(parents=True, exist_ok=True)
        spider = self.crawler.spider.name if self.crawler.spider is not None else "crawl"
        path = folder / f"{spider}-{int(time.time())}-{id(self)}.jsonl"
        with Path(path).open("w") as fh:
            for meta, doc in self.buffer:
                fh.write(json.dumps({"collection": meta.collection, "doc": doc}, default=str) + "\n")
            for doc in self.quarantined:
                fh.write(json.dumps({"collection": self.quarantine_name, "doc": doc}, default=str) + "\n")
        logger.critical(
            "%s: %d items and %d quarantined items written to %s",
            "MongoDB unreachable at close" if self.unreachable else f"MongoDB writes failed at close ({self.last_error})",
            len(self.buffer), len(self.quarantined), path,
        )


async def _sleep(seconds: float) -> None:
    from twisted.internet import reactor

    await maybe_deferred_to_future(task.deferLater(reactor, seconds, lambda: None))
