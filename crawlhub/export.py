"""``crawlhub export``: a spider's stored items (or their change history) out of MongoDB, in the
formats of Scrapy's feed exports, written by Scrapy's own item exporters.

* Items are found by spider: every stored document lists the spiders that stored it (``spiders``,
  indexed); the store's own fields (``BOOKKEEPING_FIELDS``) are left out unless asked for, so a
  file holds what the spider yielded, as ``scrapy crawl -O`` would have written it.
* Memory stays constant whatever the size: documents come through a cursor in batches of
  ``BATCH`` and go straight to the exporter. CSV needs its columns before the first row: unless
  ``fields`` names them, a first pass over the same cursor collects the field names (a set of
  names, not of documents).
* MongoDB values that JSON, CSV and XML cannot hold become text: a datetime its ISO 8601 form
  (UTC), an ObjectId or a Decimal128 its string.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import IO, Any

from pymongo.database import Database
from scrapy.exporters import BaseItemExporter

from crawlhub.items import BOOKKEEPING_FIELDS, wait_ended

FORMATS = ("jsonl", "json", "csv", "xml")
# a format's names, as Scrapy's feed exports know them (FEED_EXPORTERS: jsonlines, jsonl, jl), plus ndjson
EXTENSIONS = {"jsonl": "jsonl", "jsonlines": "jsonl", "jl": "jsonl", "ndjson": "jsonl", "json": "json", "csv": "csv",
              "xml": "xml"}
NOT_OFFERED = ("marshal", "pickle")  # Scrapy's Python-only formats: not for data leaving Python
BATCH = 500  # documents per cursor batch: bounds the memory an export holds
HISTORY_FIELDS = ("at", "collection", "key", "field", "old", "new", "url", "spider")
AGES = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


class ExportError(Exception):
    """Nothing to export, or a request that cannot be met: the message says what and where."""


def format_for(output: str | None, fmt: str | None, strict: bool = False) -> str:
    """The format asked for, else the one the output file's extension names, else jsonl. ``strict`` (the
    command): as Scrapy's ``-o`` does, a file whose extension names no format is refused (ExportError), and so is
    an unknown format name; standard output is jsonl unless a format is given."""
    if fmt:
        name = fmt.lower()
        if strict and name not in EXTENSIONS:
            raise ExportError(_unknown(name))
        return EXTENSIONS.get(name, name)
    if output and output != "-" and "." in output:
        ext = output.rsplit(".", 1)[1].lower()
        if ext in EXTENSIONS:
            return EXTENSIONS[ext]
    if strict and output and output != "-":
        ext = output.rsplit(".", 1)[1] if "." in output.rsplit("/", 1)[-1] else ""
        raise ExportError(_unknown(ext) if ext else f"{output!r} has no extension to take the format from: give one "
                          f"({', '.join(sorted(EXTENSIONS))}), or the format after a colon ({output}:jsonl) or with -t")
    return "jsonl"


def split_output(output: str) -> tuple[str, str | None]:
    """``-o URI:FORMAT``, as Scrapy's command line takes it: the path and the format, when what follows the last
    colon is a format's name (else the whole of ``output`` is the path)."""
    path, sep, name = output.rpartition(":")
    if sep and path and (name.lower() in EXTENSIONS or name.lower() in NOT_OFFERED):
        return path, name
    return output, None


def _unknown(name: str) -> str:
    if name in NOT_OFFERED:
        return f"format {name!r} is Python-only (Scrapy has it, crawlhub export does not): use one of {', '.join(FORMATS)}"
    return (f"unrecognized output format {name!r}: use one of {', '.join(sorted(EXTENSIONS))}, as the file's extension, "
            f"after a colon at the end of the output (-o FILE:FORMAT) or with -t FORMAT")


def parse_since(text: str, now: datetime | None = None) -> datetime:
    """A point in time (UTC): an ISO 8601 date or time (UTC unless it says otherwise), or an age back
    from ``now`` (``90s``, ``30m``, ``6h``, ``2d``, ``1w``)."""
    now = now or datetime.now(timezone.utc)
    text = text.strip()
    if m := re.fullmatch(r"(\d+(?:\.\d+)?)\s*([smhdw])", text, re.IGNORECASE):
        return now - timedelta(seconds=float(m[1]) * AGES[m[2].lower()])
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise ExportError(f"--since {text!r}: not an ISO 8601 date or time (2026-11-20, 2026-11-20T08:00Z) "
                          f"nor an age (90s, 30m, 6h, 2d, 1w)") from None
    return when.replace(tzinfo=timezone.utc) if when.tzinfo is None else when.astimezone(timezone.utc)


def plain(value: Any) -> Any:
    """``value`` with what MongoDB returns and feeds cannot hold made text (recursively)."""
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, datetime):
        return (value if value.tzinfo else value.replace(tzinfo=timezone.utc)).isoformat()
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    if hasattr(value, "to_decimal"):  # Decimal128
        return str(value.to_decimal())
    return str(value)  # ObjectId, Regex, ...


@dataclass
class Plan:
    """What one export reads: per collection the query, and the fields the output leaves out."""

    database: str
    spider: str
    history: bool
    queries: list[tuple[str, dict[str, Any]]]  # (collection, filter), in export order
    total: int  # without counting (plan's ``count``), the number of collections with items
    drop: frozenset[str] = field(default_factory=frozenset)
    # --include-gone: the time gone is judged at; an item whose wait ended by then (gone_due) not yet confirmed
    # by a worker is exported gone, with the wait's end as its gone_at (what the confirmation will store)
    gone_as_of: datetime | None = None

    def documents(self, db: Database[Any]) -> Iterator[dict[str, Any]]:
        """Every document to export, through cursors (``BATCH`` at a time), as plain data."""
        for name, query in self.queries:
            for doc in db[name].find(query, batch_size=BATCH):
                if self.gone_as_of is not None and doc.get("gone_at") is None and wait_ended(doc, self.gone_as_of):
                    doc["gone_at"] = doc["gone_due"]
                yield {k: plain(v) for k, v in doc.items() if k not in self.drop}

    def field_names(self, db: Database[Any]) -> list[str]:
        """The fields the documents have, in the order they first appear (a pass over the cursor)."""
        seen: dict[str, None] = {}
        for doc in self.documents(db):
            seen.update(dict.fromkeys(doc))
        return list(seen)


def delta_clauses(since: datetime, include_gone: bool, now: datetime) -> list[dict[str, Any]]:
    """What a delta since ``since`` takes, as filters that no document matches two of (each exported once, with no
    set of ids kept), each led by a field the store indexes (MongoWriter.ensure_index): a server reads that index for
    each, where one ``$or`` of them made SecantusDB read the whole collection (docs/benchmarks.md, "Export").

    * ``changed_at`` since then: the content was written (or an item found gone was seen again);
    * no ``changed_at`` (stored before it existed) and ``last_seen`` since then (never misses a change, may take an
      unchanged one);
    * with ``include_gone``, of the rest: found gone since then (``gone_at``), or its wait as missing ended since
      then (``gone_due``, not yet marked): a delta carries the day's removals."""
    written: list[dict[str, Any]] = [{"changed_at": {"$gte": since}}, {"changed_at": None, "last_seen": {"$gte": since}}]
    if not include_gone:
        return written
    unwritten: list[dict[str, Any]] = [{"changed_at": {"$lt": since}}, {"changed_at": None, "last_seen": {"$lt": since}}]
    removed: list[dict[str, Any]] = [{"gone_at": {"$gte": since}},
                                     {"gone_due": {"$gte": since, "$lte": now}, "gone_at": None}]
    return written + [{**gone, **rest} for gone in removed for rest in unwritten]


def plan(db: Database[Any], spider: str, *, collection: str | None = None, since: datetime | None = None,
         include_gone: bool = False, history: bool = False, meta: bool = False,
         excluded: tuple[str, ...] = (), changes: str = "changes", count: bool = True) -> Plan:
    """What to export of ``spider``'s items in ``db`` (ExportError, naming the database and the
    collection, when there is nothing). ``count``: the total, for a progress bar (else only whether
    each collection holds any: a count costs a pass over the index on some servers)."""

    def how_many(name: str, query: dict[str, Any]) -> int:
        if count:
            return int(db[name].count_documents(query))
        return 1 if db[name].find_one(query, {"_id": 1}) is not None else 0

    where = f"database {db.name!r}"
    names = set(db.list_collection_names())
    if history:
        if not changes:
            raise ExportError("--history: the change history is off (CHANGES_COLLECTION is empty)")
        query: dict[str, Any] = {"spider": spider}
        if collection:
            query["collection"] = collection
        if since:
            query["at"] = {"$gte": since}
        total = how_many(changes, query) if changes in names else 0
        if not total:
            what = f" of collection {collection!r}" if collection else ""
            raise ExportError(f"nothing to export: {where}, collection {changes!r} holds no change record of "
                              f"spider {spider!r}{what}{_since(since)} (items change when a recrawl finds them different)")
        return Plan(db.name, spider, True, [(changes, query)], total, frozenset({"_id"}))

    now = datetime.now(timezone.utc)
    base: dict[str, Any] = {"spiders": spider}
    if not include_gone:
        # gone: marked, or its wait (REVISIT_GONE_DELAY) ended unseen and no worker has marked it yet
        base.update({"gone_at": None, "gone_due": {"$not": {"$lte": now}}})
    clauses = delta_clauses(since, include_gone, now) if since else [{}]
    if collection:
        if collection not in names:
            have = ", ".join(sorted(n for n in names if not n.startswith("system."))) or "none"
            raise ExportError(f"nothing to export: {where} has no collection {collection!r} (it has: {have})")
        candidates = [collection]
    else:
        skip = set(excluded) | {changes}
        candidates = sorted(n for n in names if n not in skip and not n.startswith(("system.", "_")))
    # the clause's fields first: SecantusDB reads the index of a query's first indexed field (`spiders` matches all)
    counts = {(name, n): how_many(name, {**clause, **base}) for name in candidates for n, clause in enumerate(clauses)}
    queries = [(name, {**clause, **base}) for name in candidates for n, clause in enumerate(clauses) if counts[name, n]]
    if not queries:
        listed = ", ".join(f"{name!r}" for name in candidates) or "no item collection"
        gone = "" if include_gone else " (gone items left out: --include-gone)"
        raise ExportError(f"nothing to export: {where}, {'collection' if len(candidates) == 1 else 'collections'} {listed}: "
                          f"no item of spider {spider!r}{_since(since)}{gone}")
    drop = set() if meta else set(BOOKKEEPING_FIELDS) - ({"gone_at"} if include_gone else set())
    return Plan(db.name, spider, False, queries, sum(counts.values()), frozenset(drop | {"_id"}),
                now if include_gone else None)


def missing_fields(db: Database[Any], export_plan: Plan, fields: list[str]) -> dict[str, str]:
    """Of ``fields``, those no exported document would have, each with why (an export that silently wrote an empty
    column would hide a typo)."""
    missing = {}
    for name in fields:
        if name in export_plan.drop:
            missing[name] = "a field of the store's own bookkeeping: add --meta to export it"
            continue
        if export_plan.history and name in HISTORY_FIELDS:
            continue
        if not any(db[collection].find_one({**query, name: {"$exists": True}}, {"_id": 1})
                   for collection, query in export_plan.queries):
            missing[name] = "no exported item has it"
    return missing


def fields_of(db: Database[Any], export_plan: Plan, most: int = 100) -> list[str]:
    """The fields of the first ``most`` documents to export (what an error suggests instead of a missing field)."""
    seen: dict[str, None] = {}
    for n, doc in enumerate(export_plan.documents(db)):
        seen.update(dict.fromkeys(doc))
        if n + 1 >= most:
            break
    return list(seen)


def _since(since: datetime | None) -> str:
    return f" since {since.isoformat()}" if since else ""


def exporter(fmt: str, out: IO[bytes], fields: list[str] | None, encoding: str = "utf-8",
             indent: int | None = None) -> BaseItemExporter:
    """Scrapy's item exporter for ``fmt``, writing to the binary stream ``out``."""
    from scrapy.exporters import CsvItemExporter, JsonItemExporter, JsonLinesItemExporter, XmlItemExporter

    kinds: dict[str, type[Any]] = {"jsonl": JsonLinesItemExporter, "json": JsonItemExporter, "csv": CsvItemExporter, "xml": XmlItemExporter}
    if fmt not in kinds:
        raise ExportError(f"unknown format {fmt!r}: one of {', '.join(FORMATS)}")
    options: dict[str, Any] = {"encoding": encoding, "fields_to_export": fields}
    if fmt in ("json", "xml") and indent is not None:
        options["indent"] = indent
    if fmt == "csv":  # a multi-valued field as one cell, its values joined as Scrapy does
        options["join_multivalued"] = ","
    made: BaseItemExporter = kinds[fmt](out, **options)
    return made


def export(db: Database[Any], export_plan: Plan, fmt: str, out: IO[bytes], fields: list[str] | None = None,
           progress: Callable[[int], None] | None = None, encoding: str = "utf-8", indent: int | None = None) -> int:
    """Write ``export_plan``'s documents to ``out`` in ``fmt``; returns how many were written."""
    if fields is None and export_plan.history:
        fields = list(HISTORY_FIELDS)
    if fmt == "csv" and fields is None:
        if len(export_plan.queries) > 1:
            found = ", ".join(name for name, _ in export_plan.queries)
            raise ExportError(f"spider {export_plan.spider!r} stored items in several collections of database "
                              f"{export_plan.database!r} ({found}): a CSV file holds one kind of row, "
                              f"choose one with --collection (or name the columns with --fields)")
        fields = export_plan.field_names(db)
    writer = exporter(fmt, out, fields, encoding, indent)
    writer.start_exporting()
    written = 0
    for doc in export_plan.documents(db):
        if fmt == "csv":  # a nested document in one cell: as JSON, not as Python's repr
            doc = {k: json.dumps(v, ensure_ascii=False) if _nested(v) else v for k, v in doc.items()}
        writer.export_item(doc)
        written += 1
        if progress and written % 100 == 0:
            progress(written)
    writer.finish_exporting()
    if progress:
        progress(written)
    return written


def _nested(value: Any) -> bool:
    return isinstance(value, dict) or (isinstance(value, list) and any(isinstance(v, (dict, list)) for v in value))
