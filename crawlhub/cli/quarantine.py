"""``crawlhub quarantine list|show|requeue|purge``: items that broke their type's contract (ValidatePipeline), or
that MongoDB refused, kept with every reason in MONGO_QUARANTINE_COLLECTION (docs/quality.md); the logic is in
crawlhub.monitor.quarantine."""

from __future__ import annotations

import json
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
    """The quarantine collection of the project's database; a bad record id is exit 2."""
    from crawlhub.monitor.quarantine import NotARecordId

    current = settings()
    with mongo_database(current) as db:
        try:
            yield db[current.get("MONGO_QUARANTINE_COLLECTION")]
        except NotARecordId as exc:
            raise BadInput(str(exc)) from None


reason_option = click.option("--reason", help="Only records with a reason containing this (any case): 'missing price'.")


@group.command("list")
@click.argument("spider", callback=check_spider)
@reason_option
@click.option("--limit", default=50, show_default=True, help="Records shown, newest first.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON: the counts and the records shown, whole.")
def list_(spider: str, reason: str | None, limit: int, as_json: bool) -> None:
    """SPIDER's quarantined items, newest first (id, time, item type, page, reasons), and how many there are by
    reason."""
    from crawlhub.monitor.quarantine import summary

    with _records() as records:
        data = summary(records, spider, reason, limit)
    if as_json:
        click.echo(json.dumps(data, indent=2, ensure_ascii=False))
        return
    for record in data["records"]:
        when = str(record.get("quarantined_at") or "?")[:19].replace("T", " ")
        click.echo(f"{record['_id']}  {when}  {record.get('item_type') or record.get('collection')}  "
                   f"{record.get('source_url') or '(no page)'}  {'; '.join(record.get('reasons') or [])[:200]}")
    matching = f" with a reason containing {reason!r}" if reason else ""
    counts = ", ".join(f"{why} {n}" for why, n in list(data["by_reason"].items())[:10])
    click.echo(f"{data['total']} quarantined item(s) of {spider}{matching}" + (f"; by reason: {counts}" if counts else ""))


@group.command("show")
@click.argument("spider", callback=check_spider)
@click.argument("record_id")
def show(spider: str, record_id: str) -> None:
    """The whole record RECORD_ID (from `crawlhub quarantine list`): the item, every reason per field, its page and
    the page's request."""
    from crawlhub.export import plain
    from crawlhub.monitor.quarantine import object_id

    with _records() as records:
        record = records.find_one({"_id": object_id(record_id), "spider": spider})
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
    from crawlhub.monitor.quarantine import query
    from crawlhub.monitor.quarantine import requeue as requeue_pages

    if not (record_ids or reason or everything):
        raise click.UsageError("say which records: RECORD_IDS (see `crawlhub quarantine list`), --reason TEXT or --all")
    with _records() as records:
        query(spider, reason, record_ids)  # a bad id is said before Redis is asked
        server = connect()
        done = requeue_pages(records, server, keys(spider, server), spider, reason, record_ids, everything)
    if done.missing:
        raise click.ClickException(f"no quarantine record {', '.join(done.missing)} of {spider}; nothing was queued")
    click.echo(f"{len(done.pages)} page(s) queued again for {done.items} quarantined item(s) of {spider}; "
               "their records removed (a page still broken quarantines its items again)")
    if done.kept:
        click.echo(f"{done.kept} record(s) without their page's request left as they are (refused by MongoDB, or "
                   f"quarantined before records kept it): `crawlhub seed {spider}` their source_url to crawl them")


@group.command("purge")
@click.argument("spider", callback=check_spider)
@reason_option
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
def purge(spider: str, reason: str | None, yes: bool) -> None:
    """Delete SPIDER's quarantine records (those with a reason containing --reason only)."""
    from crawlhub.monitor.quarantine import purge as delete
    from crawlhub.monitor.quarantine import query

    with _records() as records:
        count = records.count_documents(query(spider, reason))
        if not yes:
            click.confirm(f"Delete {count} quarantine record(s) of {spider} in {records.name}?", abort=True)
        deleted = delete(records, spider, reason)
    click.echo(f"deleted {deleted} quarantine record(s)")
