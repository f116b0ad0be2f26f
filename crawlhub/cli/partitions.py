"""``crawlhub partitions SPIDER``: a partitioned frontier, partition by partition (docs/frontier.md)."""

from __future__ import annotations

import json
from collections import Counter

import click

from crawlhub.cli._common import check_spider, connect, keys
from crawlhub.frontier.partitions import describe
from crawlhub.monitor.status import partition_rows


@click.command("partitions")
@click.argument("spider", callback=check_spider)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def partitions(spider: str, as_json: bool) -> None:
    """SPIDER's frontier partition by partition: slot, node, domains, queued, in flight; and per node.

    On a Redis Cluster, a master holding more partitions than the others carries more of the crawl:
    move slots (`redis-cli --cluster reshard`, docs/deploy.md) until each holds about as many.
    """
    server = connect()
    layout = keys(spider, server)
    rows = partition_rows(server, layout)
    if as_json:
        click.echo(json.dumps({"spider": spider, "partitions": layout.partitions, "tagged": layout.tagged,
                               "rows": rows}, indent=2))
        return
    click.echo(f"{spider}: {describe(layout)}")
    click.echo(f"{'p':>3} {'tag':<20} {'slot':>5} {'node':<21} {'domains':>7} {'queued':>9} {'inflight':>8} "
               f"{'delayed':>7} {'dlq':>5} {'seen':>10}")
    for r in rows:
        click.echo(f"{r['partition']:>3} {r['tag'] or '(classic)':<20} {r['slot'] if r['slot'] is not None else '-':>5} "
                   f"{r['node'] or '-':<21} {r['domains']:>7} {r['queued']:>9} {r['inflight']:>8} {r['delayed']:>7} "
                   f"{r['dlq']:>5} {r['seen']:>10}")
    nodes = Counter(r["node"] for r in rows if r["node"])
    if nodes:
        queued: Counter[str] = Counter()
        for r in rows:
            queued[r["node"]] += r["queued"]
        click.echo("per node: " + ", ".join(f"{n}: {c} partitions, {queued[n]} queued" for n, c in sorted(nodes.items())))
