"""Steering a crawl: ``crawlhub seed``, ``bad-seeds``, ``pause``, ``resume``, ``budget`` and ``reset``."""

from __future__ import annotations

import json
import sys
from typing import IO

import click

from crawlhub.cli._common import (
    BadInput,
    check_spider,
    connect,
    keys,
    settings,
    shown_seed,
    spider_class,
    spider_or_leftover,
)
from crawlhub.frontier import control
from crawlhub.seeds import BadSeed, WrongSeedKey, parse_seed, push_seeds, seed_callback


@click.command()
@click.argument("spider", callback=check_spider)
@click.argument("seeds", nargs=-1)
@click.option("--file", "file", type=click.File("r"), help="Seeds, one per line (URL or JSON object); - = stdin.")
@click.option("--priority", type=int, help="Priority of the seeds (a URL becomes {\"url\": ..., \"priority\": N}).")
def seed(spider: str, seeds: tuple[str, ...], file: IO[str] | None, priority: int | None) -> None:
    """Push SEEDS (URLs or JSON objects) to SPIDER's start_urls; all are checked first, and none is pushed if one is bad."""
    current = settings(spider)
    raws = list(seeds) + ([line.strip() for line in file if line.strip() and not line.startswith("#")] if file else [])
    if not raws:
        raise BadInput("no seeds given (arguments or --file)")
    good, bad = [], []
    spidercls: type | None = None
    for raw in raws:
        try:
            parsed = parse_seed(raw, current.getint("SEED_MAX_BYTES"))
            if parsed.callback:  # checked as its workers will check it: a method the frontier can store by name
                spidercls = spidercls or spider_class(spider)
                if spidercls is not None:
                    seed_callback(spidercls, parsed.callback)
        except BadSeed as exc:
            bad.append(f"refused {raw[:100]!r}: {exc}")
            continue
        if priority is not None:
            raw = json.dumps({**(json.loads(raw) if raw.lstrip().startswith("{") else {"url": parsed.url}), "priority": priority})
        good.append(raw)
    if bad:
        for line in bad:
            click.echo(line, err=True)
        raise BadInput(f"{len(bad)} of {len(raws)} seed(s) refused; nothing pushed")
    server = connect()
    key = keys(spider, server).seeds
    try:
        how = push_seeds(server, key, good, current.getbool("REDIS_START_URLS_AS_SET"),
                         current.getbool("REDIS_START_URLS_AS_ZSET"))
    except WrongSeedKey as exc:
        raise click.ClickException(f"nothing pushed: {exc}") from None
    click.echo(f"pushed {len(good)} seed(s) to {key} ({how})")


@click.command("bad-seeds")
@click.argument("spider", callback=check_spider)
@click.option("--limit", default=20, show_default=True)
@click.option("--clear", is_flag=True, help="Delete them after printing.")
def bad_seeds(spider: str, limit: int, clear: bool) -> None:
    """List the seeds SPIDER refused, with the reasons."""
    server = connect()
    key = keys(spider, server).bad_seeds
    shown = server.lrange(key, 0, limit - 1)
    for raw in shown:
        record = json.loads(raw)
        click.echo(f"{record['reason']}: {shown_seed(record['seed'])}")
    total = server.llen(key) if len(shown) >= limit else len(shown)
    click.echo(f"{total} bad seed(s) in {key}" + (f" (the first {len(shown)} shown)" if total > len(shown) else ""))
    if clear:
        server.delete(key)
        click.echo(f"cleared {key}")


@click.command()
@click.argument("spider", callback=check_spider)
def pause(spider: str) -> None:
    """Stop every worker of SPIDER leasing new requests (they stay up; in-flight pages finish)."""
    server = connect()
    control.pause(server, keys(spider, server))
    click.echo(f"{spider} paused: workers take no new requests within FRONTIER_POLL_INTERVAL; `crawlhub resume {spider}`")


@click.command()
@click.argument("spider", callback=check_spider)
def resume(spider: str) -> None:
    """Let SPIDER's workers lease again after `crawlhub pause`."""
    server = connect()
    click.echo(f"{spider} resumed" if control.resume(server, keys(spider, server)) else f"{spider} was not paused")


@click.command()
@click.argument("spider", callback=check_spider)
@click.argument("pages", type=int, required=False)
@click.option("--clear", is_flag=True, help="Remove the run-time budget (CRAWL_BUDGET applies again).")
@click.option("--reset-used", is_flag=True, help="Start counting used requests from 0 again.")
def budget(spider: str, pages: int | None, clear: bool, reset_used: bool) -> None:
    """Show or set SPIDER's cluster-wide crawl budget (requests the cluster may take)."""
    try:
        server = connect()
        state = control.budget(server, keys(spider, server), settings().getint("CRAWL_BUDGET"), pages, clear, reset_used)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="PAGES") from None
    click.echo(f"budget of {spider}: {state['limit'] or 'no limit'}; {state['used']} requests taken; {state['queued']} queued")


@click.command()
@click.argument("spider", callback=spider_or_leftover)
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
def reset(spider: str, yes: bool) -> None:
    """Delete SPIDER's whole crawl state: seeds, queue, dupefilter, in flight, DLQ, stats, audit log, workers."""
    server = connect()
    spider_keys = keys(spider, server)
    present = [k for k in control.existing_keys(server, spider_keys) if server.exists(k)]
    if not yes and not click.confirm(f"Delete {len(present)} key(s) of {spider} (queue, dupefilter, in flight, DLQ, "
                                     f"stats, audit log, workers)?", default=False):
        click.echo("nothing deleted")
        sys.exit(1)
    click.echo(f"deleted {control.reset(server, spider_keys)} key(s) of {spider}")
