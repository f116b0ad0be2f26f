"""The quarantine (MONGO_QUARANTINE_COLLECTION): items that broke their type's contract or that MongoDB refused, each
with every reason, its page and that page's request. What ``crawlhub quarantine`` and the web UI show and do."""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from crawlhub.export import plain
from crawlhub.frontier import control

if TYPE_CHECKING:
    import redis
    from pymongo.collection import Collection

    from crawlhub.frontier.keys import Keys


class NotARecordId(ValueError):
    """Not a record's id (24 hex digits)."""


def query(spider: str, reason: str | None = None, ids: tuple[str, ...] | list[str] = ()) -> dict[str, Any]:
    """SPIDER's records: those with a reason containing ``reason`` (any case), or the records ``ids``."""
    found: dict[str, Any] = {"spider": spider}
    if reason:
        found["reasons"] = {"$regex": re.escape(reason), "$options": "i"}
    if ids:
        found["_id"] = {"$in": [object_id(text) for text in ids]}
    return found


def object_id(text: str) -> Any:
    from bson import ObjectId
    from bson.errors import InvalidId

    try:
        return ObjectId(text)
    except (InvalidId, TypeError):
        raise NotARecordId(f"{text!r} is not a quarantine record's id (24 hex digits, as `crawlhub quarantine list` "
                           "shows them)") from None


def summary(records: Collection[Any], spider: str, reason: str | None = None, limit: int = 50) -> dict[str, Any]:
    """How many of SPIDER's records there are (matching ``reason``), by reason, and the newest ``limit``, whole (as
    plain data: ``_id`` as text, times as ISO)."""
    selected = query(spider, reason)
    shown = list(records.find(selected).sort("quarantined_at", -1).limit(max(0, limit)))
    by_reason = Counter(why for record in records.find(selected, {"reasons": 1}) for why in record.get("reasons") or [])
    return {"spider": spider, "total": records.count_documents(selected), "by_reason": dict(by_reason.most_common()),
            "records": [plain(record) for record in shown]}


@dataclass
class Requeued:
    """What :func:`requeue` did."""

    pages: list[str] = field(default_factory=list)  # the pages queued again, each once
    items: int = 0  # the records whose page was queued (and that were removed)
    kept: int = 0  # records without their page's request, left as they are
    missing: list[str] = field(default_factory=list)  # ids asked for that are not SPIDER's records (nothing was done)


def requeue(records: Collection[Any], server: redis.Redis, keys: Keys, spider: str, reason: str | None = None,
            ids: tuple[str, ...] | list[str] = (), everything: bool = False) -> Requeued:
    """Queue the pages of SPIDER's records again (those ``ids``, those with ``reason``, or ``everything``), each page
    once, never filtered as seen and its attempts reset (as a dead letter's), then remove those records: a page still
    broken quarantines its items again. Records without their page's request are left. An id that is not one of
    SPIDER's records: nothing is done (``missing``)."""
    if not (ids or reason or everything):
        raise ValueError("say which records: ids, a reason or everything")
    found = list(records.find(query(spider, reason, ids), {"request": 1}))
    done = Requeued(missing=sorted(set(ids) - {str(record["_id"]) for record in found}))
    if done.missing:
        return done
    pages: dict[str, str] = {}  # a page's request, once per URL
    for record in found:
        if record.get("request"):
            pages.setdefault(json.loads(record["request"]).get("url", ""), record["request"])
        else:
            done.kept += 1
    for url, request in pages.items():  # queued first, then the records removed: a crash leaves a record, not a page
        control.requeue(server, keys, request, url)
    if pages:
        records.delete_many({"_id": {"$in": [record["_id"] for record in found if record.get("request")]}})
    done.pages, done.items = list(pages), len(found) - done.kept
    return done


def purge(records: Collection[Any], spider: str, reason: str | None = None) -> int:
    """Delete SPIDER's records (with ``reason`` only); how many."""
    return int(records.delete_many(query(spider, reason)).deleted_count)
