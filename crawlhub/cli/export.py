"""``crawlhub export``: a spider's stored items out of MongoDB (the logic is in crawlhub.export)."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import click

from crawlhub.addon import known_spiders
from crawlhub.cli._common import BadInput, mongo_database, settings
from crawlhub.cli._output import check_destination, opened, streams_to
from crawlhub.export import (
    FORMATS,
    ExportError,
    export,
    fields_of,
    format_for,
    missing_fields,
    parse_since,
    plan,
    split_output,
)


@click.command("export")
@click.argument("spider")
@click.option("-o", "--output", default="-", show_default=True,
              help="Where to write: a file (FILE or FILE:FORMAT, as `scrapy crawl -o` takes it), a FIFO or a device "
                   "(streamed to), or - for standard output.")
@click.option("-t", "--format", "fmt", type=click.Choice([*FORMATS, "jsonlines", "jl", "ndjson"], case_sensitive=False),
              help="Feed format [default: after FILE's colon, else from FILE's extension; jsonl on standard output].")
@click.option("--collection", help="Only this collection [default: every collection holding SPIDER's items].")
@click.option("--fields", help="Comma-separated fields to write, in this order (CSV: its columns); each must exist.")
@click.option("--since", help="Only items stored or changed since: ISO 8601 (2026-11-20, 2026-11-20T08:00Z) or an age (30m, 6h, 2d).")
@click.option("--include-gone", is_flag=True, help="Also items a recrawl found gone (with their gone_at).")
@click.option("--history", is_flag=True, help="The change records (field, old, new, at) instead of the items.")
@click.option("--meta", is_flag=True, help="Keep the store's fields (first_seen, last_seen, changed_at, spiders, content_hash).")
@click.option("--progress/--no-progress", default=None, help="A progress bar on stderr [default: when stderr is a terminal].")
def export_command(spider: str, output: str, fmt: str | None, collection: str | None, fields: str | None,
                   since: str | None, include_gone: bool, history: bool, meta: bool, progress: bool | None) -> None:
    """Write SPIDER's stored items (or with --history their changes) as jsonl, json, csv or xml, through Scrapy's
    item exporters: the files `scrapy crawl -O` writes. Streams: constant memory on any size. SPIDER may be
    one the project no longer has, if its items are still stored. A regular file is replaced only once the
    export is complete; anything else (a FIFO, a device, a symlink to one) is written to as it is."""
    current = settings()
    path, named = split_output(output)
    check_destination(path, "-o")  # everything the user typed is checked before MongoDB is read or a file touched
    try:
        # a FIFO or a device named without an extension is standard output's kind of destination: jsonl
        streamed = path != "-" and streams_to(path) and "." not in os.path.basename(path)
        fmt = format_for("-" if streamed else path, fmt or named, strict=True)
        since_at = parse_since(since) if since else None
    except ExportError as exc:
        raise BadInput(str(exc)) from None
    wanted = [f.strip() for f in fields.split(",") if f.strip()] if fields else None
    show = progress if progress is not None else sys.stderr.isatty()
    with mongo_database(current) as db:
        try:
            export_plan = plan(db, spider, collection=collection, since=since_at, include_gone=include_gone,
                               history=history, meta=meta, changes=current.get("CHANGES_COLLECTION"),
                               excluded=(current.get("MONGO_QUARANTINE_COLLECTION"), current.get("STATUS_COLLECTION")),
                               count=show)
        except ExportError as exc:
            known = known_spiders(current)
            if spider not in known:  # a name the project does not have, and nothing stored under it: bad input
                raise BadInput(f"{exc} (this project has no spider {spider!r}; its spiders: {', '.join(known)})") from None
            raise click.ClickException(str(exc)) from None
        if wanted:
            missing = missing_fields(db, export_plan, wanted)
            if missing:
                have = ", ".join(fields_of(db, export_plan))
                raise BadInput("; ".join(f"--fields {name!r}: {why}" for name, why in missing.items()) +
                               f" (the items have: {have}); nothing written")
        started = time.monotonic()
        with _progress(show, export_plan.total) as step, opened(path) as out:
            written = export(db, export_plan, fmt, out, wanted, step, current.get("FEED_EXPORT_ENCODING") or "utf-8",
                             current.getint("FEED_EXPORT_INDENT") or None)
    what = "change record(s)" if history else "item(s)"
    where = "standard output" if path == "-" else path
    took = time.monotonic() - started
    click.echo(f"exported {written} {what} of {spider} from {export_plan.database}."
               f"{','.join(name for name, _ in export_plan.queries)} to {where} as {fmt} in {took:.1f}s", err=True)


@contextmanager
def _progress(show: bool, total: int) -> Iterator[Any]:
    """A rich progress bar on stderr (items, rate, time left), or nothing."""
    if not show:
        yield None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, ProgressColumn, TextColumn, TimeRemainingColumn
    from rich.text import Text

    class Rate(ProgressColumn):
        def render(self, task: Any) -> Text:
            return Text(f"{task.speed or 0:,.0f} items/s")

    bar = Progress(TextColumn("exporting"), BarColumn(), MofNCompleteColumn(), TextColumn("items"), Rate(),
                   TimeRemainingColumn(), console=Console(stderr=True), refresh_per_second=5)
    with bar:
        task = bar.add_task("export", total=total)
        yield lambda done: bar.update(task, completed=done)
