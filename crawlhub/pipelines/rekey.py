"""Stored documents moved to the canonical form of their key's URLs (``crawlhub canonicalize-keys``).

Since ITEM_KEY_URLS_CANONICAL, CleanPipeline stores a key field that holds an http(s) URL in the form the request
fingerprint reads (:func:`crawlhub.pipelines.clean.canonical_key_url`). A document stored before under another form
of its URL (``/p?b=2&a=1``) would stay beside the one the next crawl stores (``/p?a=1&b=2``): two documents for one
page. :func:`canonicalize_keys` moves each such document to the canonical key, or merges it into the document
already there:

* the item's fields: the most recently seen document's values win, and an empty value never overwrites a found one
  (as MongoPipeline writes an item);
* ``first_seen`` the earliest, ``last_seen`` and ``changed_at`` the latest, ``spiders`` and ``cycles`` joined,
  ``gone_at`` (``missing_since``, ``gone_due``) as the most recently seen document has it; ``content_hash`` made again (the next crawl of an unchanged
  page counts it unchanged);
* the change history (CHANGES_COLLECTION) names the canonical key.

The merged document is written before the others are deleted, so a run stopped half-way (or a worker storing
meanwhile) loses nothing: running it again finishes the work. It can run while workers crawl.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pymongo.errors import DuplicateKeyError

from crawlhub._utils.urls import IgnoredParams
from crawlhub.items import is_empty
from crawlhub.pipelines.clean import canonical_key_url
from crawlhub.pipelines.mongo import content_hash, stored_fields

if TYPE_CHECKING:
    from pymongo.collection import Collection
    from pymongo.database import Database

logger = logging.getLogger(__name__)
ITEM_KEY_INDEX = "item_key"  # the unique index MongoWriter.ensure_index makes on an item collection's key


@dataclass
class Rekeyed:
    """What :func:`canonicalize_keys` found in one collection, and did (or, dry, would do)."""

    collection: str
    key_fields: tuple[str, ...] = ()
    found: int = 0  # documents under a key whose URL is not in its canonical form
    moved: int = 0  # moved to the canonical key (no document was there)
    merged: int = 0  # merged into the document under the canonical key, and deleted
    history: int = 0  # change records re-keyed
    examples: list[tuple[str, str]] = field(default_factory=list)  # (a key as stored, its canonical form)


def key_fields_of(coll: Collection[Any]) -> tuple[str, ...]:
    """The fields of the collection's unique item key (() when it has none: not an item collection)."""
    index = coll.index_information().get(ITEM_KEY_INDEX)
    return tuple(name for name, _ in index["key"]) if index else ()


def canonical_key(key: dict[str, Any], tracking: IgnoredParams | None = None) -> dict[str, Any]:
    return {name: canonical_key_url(value, tracking) for name, value in key.items()}


def _seen(doc: dict[str, Any]) -> tuple[int, Any]:
    """A sort key: never seen first, then by last_seen."""
    return (0, 0) if doc.get("last_seen") is None else (1, doc["last_seen"])


def merge(docs: list[dict[str, Any]], key: dict[str, Any]) -> dict[str, Any]:
    """One document from ``docs`` (copies of one page under forms of its key), under ``key`` (without ``_id``)."""
    docs = sorted(docs, key=_seen)  # oldest first: a later value wins, an empty one never overwrites
    fields: dict[str, Any] = {}
    for doc in docs:
        for name, value in stored_fields(doc).items():
            if name not in fields or not is_empty(value):
                fields[name] = value
    fields.update(key)
    merged: dict[str, Any] = {**fields, "content_hash": content_hash(fields)}
    for name, pick in (("first_seen", min), ("last_seen", max), ("changed_at", max)):
        times = [doc[name] for doc in docs if doc.get(name) is not None]
        if times:
            merged[name] = pick(times)
    spiders = [s for doc in docs for s in doc.get("spiders") or []]
    if spiders:
        merged["spiders"] = list(dict.fromkeys(spiders))
    cycles: dict[str, Any] = {}
    for doc in docs:
        cycles.update(doc.get("cycles") or {})
    if cycles:
        merged["cycles"] = cycles
    for name in ("gone_at", "missing_since", "gone_due"):  # a revisit's findings: the latest copy's
        if docs[-1].get(name) is not None:
            merged[name] = docs[-1][name]
    return merged


def canonicalize_keys(db: Database[Any], collection: str, *, apply: bool = True, changes: str = "changes",
                      tracking: IgnoredParams | None = None, examples: int = 3) -> Rekeyed:
    """Move ``collection``'s documents stored under a non-canonical key URL to the canonical key (merged into the
    document there, if any); with ``apply`` False only count them. ``tracking``: the parameters a canonical key URL
    is without (URL_TRACKING_PARAMS). See the module's docstring."""
    coll = db[collection]
    report = Rekeyed(collection, key_fields_of(coll))
    if not report.key_fields:
        return report
    groups: dict[tuple[Any, ...], list[Any]] = defaultdict(list)  # canonical key -> ids of documents to move
    for doc in coll.find({}, dict.fromkeys(report.key_fields, 1)):
        key = {name: doc.get(name) for name in report.key_fields}
        canonical = canonical_key(key, tracking)
        if canonical != key:
            groups[tuple(canonical.values())].append(doc["_id"])
            if len(report.examples) < examples:
                report.examples.append((_shown(key), _shown(canonical)))
    report.found = sum(len(ids) for ids in groups.values())
    for values, ids in groups.items():
        key = dict(zip(report.key_fields, values, strict=True))
        if apply:
            moved, merged = _rekey(coll, key, ids)
        else:  # what _rekey would do: merged into a document under the key, or one moved there and the rest merged
            moved = 0 if coll.count_documents(key, limit=1) else 1
            merged = len(ids) - moved
        report.moved += moved
        report.merged += merged
    if apply and report.found and changes:
        report.history = _rekey_history(db[changes], collection, tracking)
    return report


def _rekey(coll: Collection[Any], key: dict[str, Any], ids: list[Any]) -> tuple[int, int]:
    """Documents ``ids`` under ``key``: (moved, merged)."""
    for _ in range(3):  # a worker may store the canonical key meanwhile: merged into it then
        docs = list(coll.find({"_id": {"$in": ids}}))
        if not docs:  # gone meanwhile (another run)
            return 0, 0
        target = coll.find_one(key)
        whole = merge([*([target] if target else []), *docs], key)
        keep = target if target is not None else max(docs, key=_seen)
        try:
            coll.replace_one({"_id": keep["_id"]}, whole)
        except DuplicateKeyError:
            continue
        others = [doc["_id"] for doc in docs if doc["_id"] != keep["_id"]]
        if others:
            coll.delete_many({"_id": {"$in": others}})
        logger.info("%s: %s stored under %d other form(s) of its key, %s", coll.name, _shown(key), len(docs),
                    "merged into it" if target is not None else "moved to it")
        return (0 if target is not None else 1), len(others)
    raise RuntimeError(f"{coll.name}: {_shown(key)} kept changing while being merged; run it again")


def _rekey_history(changes: Collection[Any], collection: str, tracking: IgnoredParams | None) -> int:
    """The change records of ``collection`` whose key is not canonical, re-keyed: how many."""
    moved = 0
    for record in changes.find({"collection": collection}, {"key": 1}):
        key = record.get("key")
        if isinstance(key, dict) and (canonical := canonical_key(key, tracking)) != key:
            changes.update_one({"_id": record["_id"]}, {"$set": {"key": canonical}})
            moved += 1
    return moved


def _shown(key: dict[str, Any]) -> str:
    return ", ".join(str(value) for value in key.values())
