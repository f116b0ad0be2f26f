"""``crawlhub dlq list|show|requeue|purge``: requests that failed after their last attempt (<spider>:dlq)."""

from __future__ import annotations

import json
import time
from dataclasses import asdict

import click

from crawlhub.cli._common import check_spider, connect, keys
from crawlhub.frontier import control


@click.group("dlq")
def group() -> None:
    """Requests that failed after their last attempt (<spider>:dlq)."""


@group.command("list")
@click.argument("spider", callback=check_spider)
@click.option("--limit", default=50, show_default=True)
def list_(spider: str, limit: int) -> None:
    """One line per dead letter: index, URL, attempts, last status or error."""
    server = connect()
    entries = control.dead_letters(server, keys(spider, server))
    for index, (_, letter) in enumerate(entries[:limit]):
        last = f"HTTP {letter.status}" if letter.status else letter.error
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(letter.last_attempt))
        click.echo(f"{index:4}  {letter.url}  attempts={letter.attempts}  {last[:120]}  last {when}")
    click.echo(f"{len(entries)} dead letter(s)")


@group.command("show")
@click.argument("spider", callback=check_spider)
@click.argument("index", type=int)
def show(spider: str, index: int) -> None:
    """The whole record of dead letter INDEX (from `dlq list`)."""
    server = connect()
    entries = control.dead_letters(server, keys(spider, server))
    if not 0 <= index < len(entries):
        raise click.ClickException(f"no dead letter {index}: there are {len(entries)}")
    record = asdict(entries[index][1])
    record.update(record.pop("extra"))
    record["request"] = json.loads(record["request"])
    click.echo(json.dumps(record, indent=2, ensure_ascii=False))


@group.command("requeue")
@click.argument("spider", callback=check_spider)
@click.argument("indexes", type=int, nargs=-1)
@click.option("--all", "everything", is_flag=True, help="Requeue every dead letter.")
def requeue(spider: str, indexes: tuple[int, ...], everything: bool) -> None:
    """Put dead letters back in the queue with their attempts reset."""
    if not indexes and not everything:
        raise click.UsageError("name the INDEXES to requeue (see `crawlhub dlq list`), or --all")
    server = connect()
    spider_keys = keys(spider, server)
    entries = control.dead_letters(server, spider_keys)
    done = 0
    for index in range(len(entries)) if everything else indexes:
        if not 0 <= index < len(entries):
            raise click.ClickException(f"no dead letter {index}: there are {len(entries)}")
        raw, letter = entries[index]
        done += control.requeue_dead_letter(server, spider_keys, raw, letter)
        click.echo(f"requeued {letter.url}")
    click.echo(f"{done} request(s) back in {spider_keys.part(0).queue if spider_keys.partitions == 1 else spider_keys.queue_key}:<domain>")


@group.command("purge")
@click.argument("spider", callback=check_spider)
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
def purge(spider: str, yes: bool) -> None:
    """Delete all of SPIDER's dead letters."""
    server = connect()
    names = [part.dlq for part in keys(spider, server).parts]
    count = sum(server.llen(key) for key in names)
    if not yes:
        click.confirm(f"Delete {count} dead letter(s) in {', '.join(names)}?", abort=True)
    server.delete(*names)
    click.echo(f"deleted {count} dead letter(s)")
