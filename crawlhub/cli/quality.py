"""``crawlhub quality SPIDER``: broken extraction, as the workers judged it (crawlhub.extensions.quality)."""

from __future__ import annotations

import json
import sys
import time

import click

from crawlhub.cli._common import check_spider, connect
from crawlhub.extensions.quality import quality_keys

UNHEALTHY = 4  # exit status while an event is open (docs/cli.md)


def quality_report(server, spider: str, closed: int = 20) -> dict:
    """The open events, the broken pages and the last closed events of ``spider``."""
    keys = quality_keys(spider)
    pipe = server.pipeline(transaction=False)
    pipe.hvals(keys["events"]).hvals(keys["broken"]).lrange(keys["closed"], 0, closed - 1)
    events, broken, done = pipe.execute()
    return {
        "spider": spider,
        "events": sorted((json.loads(e) for e in events), key=lambda e: e["since"]),
        "broken": sorted((json.loads(b) for b in broken), key=lambda b: (b["pattern"], b["url"])),
        "closed": [json.loads(e) for e in done],
    }


def _when(ts: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts))


@click.command()
@click.argument("spider", callback=check_spider)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.option("--broken", is_flag=True, help="List every broken page (else the count per pattern).")
def quality(spider: str, as_json: bool, broken: bool) -> None:
    """SPIDER's extraction health: open events, broken pages, recently closed events. Exit 4 while an event is open."""
    report = quality_report(connect(), spider)
    if as_json:
        click.echo(json.dumps(report, indent=2))
    else:
        if not report["events"]:
            click.echo(f"{spider}: extraction healthy (no open event)")
        for event in report["events"]:
            pages = [b for b in report["broken"] if b["pattern"] == event["pattern"]]
            click.echo(f"BROKEN since {_when(event['since'])}: pages like {event['pattern']}: {event['why']} "
                       f"({len(pages)} page(s) broken, e.g. {event['example']}); their items are kept, not marked gone")
        if broken:
            for page in report["broken"]:
                click.echo(f"  {page['url']}  since {_when(page['since'])}: {page['why']}")
        for event in report["closed"][:5]:
            click.echo(f"closed {_when(event['closed'])}: pages like {event['pattern']} (broken since "
                       f"{_when(event['since'])})")
    if report["events"]:
        sys.exit(UNHEALTHY)


COMMANDS = (quality,)
