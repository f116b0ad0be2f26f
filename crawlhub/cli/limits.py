"""``crawlhub limits set|clear|show``: per-domain rate and concurrency for the whole cluster."""

from __future__ import annotations

import json
from typing import Any

import click

from crawlhub.cli._common import connect, settings
from crawlhub.cli._common import domain as to_domain
from crawlhub.frontier.politeness import BadLimit, clear_limit, format_rate, set_limit
from crawlhub.monitor.status import limit_rows


@click.group("limits")
def group() -> None:
    """Per-domain rate and concurrency for the whole cluster (docs/politeness.md)."""


@group.command("set")
@click.argument("domain")
@click.argument("rate", required=False)
@click.option("--concurrency", type=int, help="Downloads at once from all workers (0 = no limit).")
def set_(domain: str, rate: str | None, concurrency: int | None) -> None:
    """Limit DOMAIN to RATE (5/s, 30/m, 100/h, none) and/or --concurrency N; every worker applies it on its next lease."""
    if rate is None and concurrency is None:
        raise click.UsageError("give a RATE, --concurrency N, or both")
    try:
        limit = set_limit(connect(), to_domain(domain), rate, concurrency)
    except BadLimit as exc:
        raise click.BadParameter(str(exc)) from None
    click.echo(f"{to_domain(domain)}: {limit_text(limit)}")


@group.command("clear")
@click.argument("domain")
def clear(domain: str) -> None:
    """Remove DOMAIN's run-time limit (the settings apply again)."""
    removed = clear_limit(connect(), to_domain(domain))
    click.echo(f"{to_domain(domain)}: {'run-time limit removed' if removed else 'had no run-time limit'}")


@group.command("show")
@click.argument("domains", nargs=-1)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def show(domains: tuple[str, ...], as_json: bool) -> None:
    """Each domain's limit, current rate, slow-down and robots.txt state."""
    rows = limit_rows(connect(), settings(), [to_domain(d) for d in domains])
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    if not rows:
        click.echo("no domain crawled yet and no run-time limits")
    for row in rows:
        extra = []
        if row["factor"] > 1:
            extra.append(f"slowed x{row['factor']:g} ({row['slowdowns']} slow-downs)")
        if row["blocked_for"]:
            extra.append(f"blocked {row['blocked_for']:g}s more")
        if row["crawl_delay"]:
            extra.append(f"Crawl-delay {row['crawl_delay']:g}s")
        for origin, r in row["robots"].items():
            extra.append(f"robots {origin.split(':')[0]}: {r['state']}" + (f" ({r['error']})" if r["error"] else ""))
        active = "" if row["active"] is None else f", {row['active']} active"  # (no cap: not counted)
        click.echo(
            f"{row['domain']:32} limit {format_rate(row['limit']['rate']):>9} x{row['limit']['concurrency'] or '∞'} "
            f"({row['source']})  now {row['rate_now']:g}/s{active}  " + "; ".join(extra)
        )


def limit_text(limit: dict[str, Any]) -> str:
    parts = []
    if "rate" in limit:
        parts.append(f"rate {format_rate(limit['rate'])}")
    if "concurrency" in limit:
        parts.append(f"concurrency {limit['concurrency'] or 'no limit'}")
    return ", ".join(parts)
