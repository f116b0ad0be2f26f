"""Watching a crawl: ``crawlhub status``, ``health``, ``log`` and ``report`` (the logic is in crawlhub.monitor)."""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import time
from collections.abc import Callable
from typing import Any

import click
import redis

from crawlhub.addon import known_spiders
from crawlhub.cli._common import BadInput, check_spider, connect, keys, settings
from crawlhub.cli._output import check_destination, opened
from crawlhub.monitor.auditlog import BadFilter, check_status_filter, format_entry, log_entry, matches, read_log
from crawlhub.monitor.report import html_report, report_data
from crawlhub.monitor.status import cluster_status, has_frontier, worker_rows
from crawlhub.monitor.text import format_status


@click.command()
@click.argument("spider", required=False, callback=check_spider)
@click.option("--json", "as_json", is_flag=True, help="Print JSON (the fields are documented in docs/cli.md).")
@click.option("--watch", is_flag=True, help="Redraw in place every --interval seconds (Ctrl-C to stop).")
@click.option("--interval", default=2.0, show_default=True, help="Seconds between redraws with --watch.")
def status(spider: str | None, as_json: bool, watch: bool, interval: float) -> None:
    """The crawl of SPIDER (or of every spider with a frontier): queue, in flight, rates, domains, workers, items, proxies."""
    current = settings()
    server = connect()
    own = {n: settings(n) for n in ([spider] if spider else known_spiders(current))}  # each spider's keys
    names = [spider] if spider else [n for n in own if has_frontier(server, own[n], n)]

    def one(name: str, unreachable: dict[str, dict[str, Any]]) -> dict[str, Any]:
        """``name``'s status with its items; a MongoDB found down for one spider is not waited for again for the
        next (``unreachable``: its URI -> what it said)."""
        where = own[name].get("MONGO_URI") or ""
        try:
            data = cluster_status(server, own[name], name, with_items=where not in unreachable)
        except redis.ResponseError as exc:  # a key of this spider holds what it should not: its problem alone
            return {"spider": name, "problems": [f"cannot read {name}'s crawl state: {exc}"]}
        if where in unreachable:
            data["items"] = unreachable[where]
        elif "error" in data["items"]:
            unreachable[where] = data["items"]
        return data

    def collect() -> list[dict[str, Any]]:
        unreachable: dict[str, dict[str, Any]] = {}
        return [one(n, unreachable) for n in names]

    if not watch:
        data = collect()
        if as_json:
            click.echo(json.dumps(data[0] if spider else data, indent=2))
        elif not data:
            click.echo("no spider has a frontier in this Redis yet")
        for row in ([] if as_json else data):
            click.echo("\n".join(format_status(row)))
        return
    _watch(lambda: "\n\n".join("\n".join(format_status(row)) for row in collect()) or "no spider has a frontier yet",
           interval)


def _watch(text: Callable[[], str], interval: float) -> None:
    """Redraw ``text()`` every ``interval`` seconds (in place on a terminal, frame after frame when piped), until
    Ctrl-C: the first SIGINT ends the wait between frames or lets the frame being read finish (a Redis or MongoDB
    call cut in the middle could leave its client's locks held and the process hanging at exit); a second one
    interrupts at once."""
    from rich.console import Console
    from rich.live import Live
    from rich.text import Text

    stopped: list[bool] = []  # (a flag the handler sets: an Event's lock is not safe to take in a signal handler)

    def interrupted(signum: int, frame: Any) -> None:
        if stopped:
            raise KeyboardInterrupt
        stopped.append(True)

    def wait() -> bool:
        """Sleep until the next frame is due; False once Ctrl-C came."""
        due = time.monotonic() + interval
        while not stopped and time.monotonic() < due:
            time.sleep(min(0.1, max(0.0, due - time.monotonic())))
        return not stopped

    def frame() -> str:
        return f"{time.strftime('%H:%M:%S')}  (every {interval:g}s, Ctrl-C to stop)\n\n{text()}"

    previous = signal.signal(signal.SIGINT, interrupted)
    try:
        if not sys.stdout.isatty():  # piped or logged: one frame after another, each ended by a blank line
            while not stopped:
                click.echo(frame() + "\n", nl=True)
                sys.stdout.flush()
                wait()
            return
        with Live(Text(frame()), console=Console(), auto_refresh=False, transient=False) as live:
            while wait():
                live.update(Text(frame()), refresh=True)
    except KeyboardInterrupt:  # (the second Ctrl-C)
        pass
    finally:
        signal.signal(signal.SIGINT, previous)


@click.command()
@click.argument("spider", callback=check_spider)
@click.option("--max-age", type=float, help="Seconds since the last heartbeat [default: WORKER_DEAD_AFTER, else 3 heartbeats].")
@click.option("--any-host", is_flag=True, help="Healthy if any worker of the cluster is alive, not only one on this host.")
def health(spider: str, max_age: float | None, any_host: bool) -> None:
    """Exit 0 if a worker of SPIDER on this host is sending heartbeats, else 1 (for health checks and probes)."""
    current = settings()
    server = connect()
    now = time.time()
    dead_after = max_age or current.getfloat("WORKER_DEAD_AFTER") or 3 * current.getfloat("WORKER_HEARTBEAT_INTERVAL")
    host = socket.gethostname()
    workers = [w for w in worker_rows(server.hgetall(keys(spider, server).workers), now, dead_after)
               if any_host or w.get("host") == host]
    alive = [w for w in workers if w["alive"]]
    if not alive:
        where = "in the cluster" if any_host else f"on {host}"
        click.echo(f"unhealthy: no worker of {spider} {where} sent a heartbeat in the last {dead_after:g}s", err=True)
        sys.exit(1)
    click.echo(f"healthy: {', '.join(w['worker'] for w in alive)} (last heartbeat "
               f"{min(now - w['last_beat'] for w in alive):.0f}s ago)")


def _status_filter(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """--status as `log` reads it; one that can match no attempt (7xx, 99, abc) is bad input (exit 2)."""
    try:
        return check_status_filter(value) if value is not None else None
    except BadFilter as exc:
        raise BadInput(str(exc)) from None


@click.command()
@click.argument("spider", callback=check_spider)
@click.option("--follow", "-f", is_flag=True, help="Keep printing new attempts as they come.")
@click.option("--status", "status_filter", callback=_status_filter,
              help="Only these: a code (404), a class (5xx) or error.")
@click.option("--domain", help="Only this domain (host[:port]).")
@click.option("--limit", "-n", default=50, show_default=True, help="Attempts to show (before following).")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
def log(spider: str, follow: bool, status_filter: str | None, domain: str | None, limit: int, as_json: bool) -> None:
    """The audit log: every download attempt of SPIDER (time, status or error, latency, bytes, worker, URL, proxy)."""
    server = connect()

    def show(entry: dict[str, Any]) -> None:
        click.echo(json.dumps(entry) if as_json else format_entry(entry))

    entries, last_id = read_log(server, spider, limit, status_filter, domain)
    for entry in entries:
        show(entry)
    stream = keys(spider, server).log
    while follow:
        got: list[tuple[bytes, list[tuple[bytes, dict[bytes, bytes]]]]] = server.xread(  # type: ignore[assignment]
            {stream: last_id}, block=2000, count=500)
        for _, batch in got or []:
            for entry_id, fields in batch:
                last_id = entry_id
                entry = log_entry(fields)
                if matches(entry, status_filter, domain):
                    show(entry)


@click.command()
@click.argument("spider", callback=check_spider)
@click.option("--html", "-o", "path", metavar="FILE",
              help="Where to write the HTML report, - for standard output [default: SPIDER-report.html in the current folder].")
def report(spider: str, path: str | None) -> None:
    """A self-contained HTML report of SPIDER's crawl: pages/min, status codes, latency per domain, items."""
    path = path or f"{spider}-report.html"
    check_destination(path, "--html")  # before Redis and MongoDB are read
    page = html_report(report_data(connect(), settings(), spider)).encode("utf-8")
    with opened(path) as out:
        out.write(page)
    where = "standard output" if path == "-" else os.path.abspath(path)
    click.echo(f"report of {spider} written to {where} ({len(page):,} bytes)", err=path == "-")
