"""``crawlhub export``: a spider's stored items out of MongoDB (the logic is in crawlhub.export)."""

from __future__ import annotations

import os
import sys
import time
from contextlib import contextmanager

import click

from crawlhub.cli._common import BadInput, ServiceDown, known_spiders, settings
from crawlhub.export import FORMATS, ExportError, export, format_for, parse_since, plan


@click.command("export")
@click.argument("spider")
@click.option("-o", "--output", default="-", show_default=True, help="The file to write; - = standard output.")
@click.option("-t", "--format", "fmt", type=click.Choice([*FORMATS, "jsonlines"], case_sensitive=False),
              help="Feed format [default: from --output's extension, else jsonl].")
@click.option("--collection", help="Only this collection [default: every collection holding SPIDER's items].")
@click.option("--fields", help="Comma-separated fields to write, in this order (CSV: its columns).")
@click.option("--since", help="Only items stored or changed since: ISO 8601 (2026-11-20, 2026-11-20T08:00Z) or an age (30m, 6h, 2d).")
@click.option("--include-gone", is_flag=True, help="Also items a recrawl found gone (with their gone_at).")
@click.option("--history", is_flag=True, help="The change records (field, old, new, at) instead of the items.")
@click.option("--meta", is_flag=True, help="Keep the store's fields (first_seen, last_seen, changed_at, spiders, content_hash).")
@click.option("--progress/--no-progress", default=None, help="A progress bar on stderr [default: when stderr is a terminal].")
def export_command(spider: str, output: str, fmt: str | None, collection: str | None, fields: str | None,
                   since: str | None, include_gone: bool, history: bool, meta: bool, progress: bool | None) -> None:
    """Write SPIDER's stored items (or with --history their changes) as jsonl, json, csv or xml, through Scrapy's
    item exporters: the files `scrapy crawl -O` writes. Streams: constant memory on any size. SPIDER may be
    one the project no longer has, if its items are still stored."""
    from pymongo.errors import PyMongoError

    from crawlhub.config import redact_url
    from crawlhub.connection import get_mongo
    from crawlhub.services import ServiceError

    current = settings()
    fmt = format_for(output, fmt)
    try:
        since_at = parse_since(since) if since else None
    except ExportError as exc:
        raise BadInput(str(exc)) from None
    wanted = [f.strip() for f in fields.split(",") if f.strip()] if fields else None
    uri = current.get("MONGO_URI") or "the embedded MongoDB"
    show = progress if progress is not None else sys.stderr.isatty()
    try:
        client = get_mongo(current, 5000)
        db = client[current.get("MONGO_DATABASE")]
        export_plan = plan(db, spider, collection=collection, since=since_at, include_gone=include_gone,
                           history=history, meta=meta, changes=current.get("CHANGES_COLLECTION"),
                           excluded=(current.get("MONGO_QUARANTINE_COLLECTION"), current.get("STATUS_COLLECTION")),
                           count=show)
        started = time.monotonic()
        with _progress(show, export_plan.total) as step, _opened(output) as out:
            written = export(db, export_plan, fmt, out, wanted, step, current.get("FEED_EXPORT_ENCODING") or "utf-8",
                             current.getint("FEED_EXPORT_INDENT") or None)
    except ExportError as exc:
        known = known_spiders(current)
        hint = "" if spider in known else f" (this project has no spider {spider!r}; its spiders: {', '.join(known)})"
        raise click.ClickException(f"{exc}{hint}") from None
    except (PyMongoError, ServiceError) as exc:
        raise ServiceDown(f"cannot read MongoDB at {redact_url(uri)}: {type(exc).__name__}: "
                          f"{str(exc).splitlines()[0][:300]}") from None
    what = "change record(s)" if history else "item(s)"
    where = "standard output" if output == "-" else output
    took = time.monotonic() - started
    click.echo(f"exported {written} {what} of {spider} from {export_plan.database}."
               f"{','.join(name for name, _ in export_plan.queries)} to {where} as {fmt} in {took:.1f}s", err=True)


@contextmanager
def _opened(output: str):
    """The binary stream to write to: stdout, or ``output``.part renamed to ``output`` once complete
    (an export that fails leaves no file that looks whole)."""
    if output == "-":
        yield sys.stdout.buffer
        sys.stdout.buffer.flush()
        return
    partial = f"{output}.part"
    try:
        with open(partial, "wb") as out:
            yield out
    except BaseException:
        if os.path.exists(partial):
            os.unlink(partial)
        raise
    os.replace(partial, output)


@contextmanager
def _progress(show: bool, total: int):
    """A rich progress bar on stderr (items, rate, time left), or nothing."""
    if not show:
        yield None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, ProgressColumn, TextColumn, TimeRemainingColumn
    from rich.text import Text

    class Rate(ProgressColumn):
        def render(self, task) -> Text:
            return Text(f"{task.speed or 0:,.0f} items/s")

    bar = Progress(TextColumn("exporting"), BarColumn(), MofNCompleteColumn(), TextColumn("items"), Rate(),
                   TimeRemainingColumn(), console=Console(stderr=True), refresh_per_second=5)
    with bar:
        task = bar.add_task("export", total=total)
        yield lambda done: bar.update(task, completed=done)


COMMANDS = (export_command,)
