"""``crawlhub quarantine list|show|requeue|purge``: items that broke their type's contract (ValidatePipeline), or
that MongoDB refused, kept with every reason in MONGO_QUARANTINE_COLLECTION (docs/quality.md)."""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import click

from crawlhub.cli._common import BadInput, check_spider, connect, keys, mongo_database, settings


@click.group("quarantine")
def group() -> None:
    """Items that broke their type's contract, with every reason (MONGO_QUARANTINE_COLLECTION)."""


@contextmanager
def _records() -> Iterator[Any]:
    """The quarantine collection of the project's database."""
    current = settings()
    with mongo_database(current) as db:
        yield db[current.get("MONGO_QUARANTINE_COLLECTION")]


def _query(spider: str, reason: str | None = None, ids: tuple[str, ...] = ()) -> dict[str, Any]:
    """SPIDER's records: those with a reason containing ``reason`` (any case), or the records ``ids``."""
    query: dict[str, Any] = {"spider": spider}
    if reason:
        query["reasons"] = {"$regex": re.escape(reason), "$options": "i"}
    if ids:
        query["_id"] = {"$in": [_object_id(text) for text in ids]}
    return query


def _object_id(text: str) -> Any:
    from bson import ObjectId
    from bson.errors import InvalidId

    try:
        return ObjectId(text)
    except (InvalidId, TypeError):
        raise BadInput(f"{text!r} is not a quarantine record's id (24 hex digits, as `crawlhub quarantine list` "
                       "shows them)") from None


def _when(record: dict[str, Any]) -> str:
    from crawlhub.export import plain

    return str(plain(record.get("quarantined_at")) or "?")[:19].replace("T", " ")


reason_option = click.option("--reason", help="Only records with a reason containing this (any case): 'missing price'.")


@group.command("list")
@click.argument("spider", callback=check_spider)
@reason_option
@click.option("--limit", default=50, show_default=True, help="Records shown, newest first.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON: the counts and the records shown, whole.")
def list_(spider: str, reason: str | None, limit: int, as_json: bool) -> None:
    """SPIDER's quarantined items, newest first (id, time, item type, page, reasons), and how many there are by
    reason."""
    from crawlhub.export import plain

    query = _query(spider, reason)
    with _records() as records:
        shown = list(records.find(query).sort("quarantined_at", -1).limit(max(0, limit)))
        by_reason = Counter(why for record in records.find(query, {"reasons": 1}) for why in record.get("reasons") or [])
        total = records.count_documents(query)
    if as_json:
        click.echo(json.dumps({"spider": spider, "total": total, "by_reason": dict(by_reason.most_common()),
                               "records": [plain(record) for record in shown]}, indent=2, ensure_ascii=False))
        return
    for record in shown:
        reasons = "; ".join(record.get("reasons") or [])
        click.echo(f"{record['_id']}  {_when(record)}  {record.get('item_type') or record.get('collection')}  "
                   f"{record.get('source_url') or '(no page)'}  {reasons[:200]}")
    matching = f" with a reason containing {reason!r}" if reason else ""
    counts = ", ".join(f"{why} {n}" for why, n in by_reason.most_common(10))
    click.echo(f"{total} quarantined item(s) of {spider}{matching}" + (f"; by reason: {counts}" if counts else ""))


@group.command("show")
@click.argument("spider", callback=check_spider)
@click.argument("record_id")
def show(spider: str, record_id: str) -> None:
    """The whole record RECORD_ID (from `crawlhub quarantine list`): the item, every reason per field, its page and
    the page's request."""
    from crawlhub.export import plain

    with _records() as records:
        record = records.find_one({"_id": _object_id(record_id), "spider": spider})
    if record is None:
        raise click.ClickException(f"no quarantine record {record_id} of {spider} (`crawlhub quarantine list {spider}`)")
    record = plain(record)
    if isinstance(record.get("request"), str):
        record["request"] = json.loads(record["request"])
    click.echo(json.dumps(record, indent=2, ensure_ascii=False))


@group.command("requeue")
@click.argument("spider", callback=check_spider)
@click.argument("record_ids", nargs=-1)
@reason_option
@click.option("--all", "everything", is_flag=True, help="Every record of SPIDER.")
def requeue(spider: str, record_ids: tuple[str, ...], reason: str | None, everything: bool) -> None:
    """Crawl the pages of quarantined items again (once the spider or the site is fixed), each page once, and remove
    their records: a page still broken quarantines its items again. Records without their page's request (MongoDB
    refused the item, or it was quarantined before records kept one) are left."""
    from crawlhub.frontier import control

    if not (record_ids or reason or everything):
        raise click.UsageError("say which records: RECORD_IDS (see `crawlhub quarantine list`), --reason TEXT or --all")
    query = _query(spider, reason, record_ids)
    with _records() as records:
        found = list(records.find(query, {"request": 1, "source_url": 1}))
        if record_ids and len(found) < len(set(record_ids)):
            missing = sorted(set(record_ids) - {str(record["_id"]) for record in found})
            raise click.ClickException(f"no quarantine record {', '.join(missing)} of {spider}; nothing was queued")
        pages: dict[str, str] = {}  # a page's request, once per URL
        for record in found:
            if record.get("request"):
                pages.setdefault(json.loads(record["request"]).get("url", ""), record["request"])
        if pages:
            server = connect()
            spider_keys = keys(spider, server)
            for url, request in pages.items():  # queued first, then the records removed: a crash leaves a record
                control.requeue(server, spider_keys, request, url)
            records.delete_many({"_id": {"$in": [record["_id"] for record in found if record.get("request")]}})
    kept = sum(1 for record in found if not record.get("request"))
    click.echo(f"{len(pages)} page(s) queued again for {len(found) - kept} quarantined item(s) of {spider}; "
               "their records removed (a page still broken quarantines its items again)")
    if kept:
        click.echo(f"{kept} record(s) without their page's request left as they are (refused by MongoDB, or "
                   f"quarantined before records kept it): `crawlhub seed {spider}` their source_url to crawl them")


@group.command("purge")
@click.argument("spider", callback=check_spider)
@reason_option
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
def purge(spider: str, reason: str | None, yes: bool) -> None:
    """Delete SPIDER's quarantine records (those with a reason containing --reason only)."""
    query = _query(spider, reason)
    with _records() as records:
        count = records.count_documents(query)
        if not yes:
            click.confirm(f"Delete {count} quarantine record(s) of {spider} in {records.name}?", abort=True)
        deleted = records.delete_many(query).deleted_count
    click.echo(f"deleted {deleted} quarantine record(s)")
