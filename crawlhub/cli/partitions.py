"""``crawlhub partitions SPIDER``: a partitioned frontier, partition by partition (docs/frontier.md)."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import click

from crawlhub.cli._common import BadInput, check_spider, connect, keys
from crawlhub.frontier.keys import Keys
from crawlhub.frontier.partitions import describe
from crawlhub.monitor.status import partition_rows


@click.command("partitions")
@click.argument("spider", callback=check_spider)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.option("--balance", is_flag=True, help="On a Redis Cluster: the partition moves that leave every master "
              "within one partition of the others (carried out with --yes).")
@click.option("--yes", is_flag=True, help="With --balance: move the partitions' slots, keys and all, now.")
def partitions(spider: str, as_json: bool, balance: bool, yes: bool) -> None:
    """SPIDER's frontier partition by partition: slot, node, domains, queued, in flight; and per node.

    On a Redis Cluster, a master holding more partitions than the others carries more of the crawl.
    A cluster created with equal slot ranges (`redis-cli --cluster create`) holds as many on each master,
    give or take one; after a reshard or a new master, `--balance` shows the moves and `--balance --yes`
    makes them (workers may go on meanwhile; docs/deploy.md).
    """
    server = connect()
    layout = keys(spider, server)
    if balance:
        _balance(server, layout, yes, as_json)
        return
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


def _balance(server: Any, layout: Keys, yes: bool, as_json: bool) -> None:
    from redis.cluster import RedisCluster

    from crawlhub.frontier.placement import holders, move_slot, plan

    if not isinstance(server, RedisCluster) or not layout.tagged:
        raise BadInput("--balance is for a partitioned frontier on a Redis Cluster (REDIS_CLUSTER_NODES): one "
                       "server holds every partition")
    held = holders(server, layout)
    moves = plan(held, layout)
    counts = {node: len(parts) for node, parts in sorted(held.items())}
    if as_json:
        click.echo(json.dumps({"per_node": counts, "moves": [m.__dict__ for m in moves], "moved": yes and bool(moves)}))
    else:
        click.echo("per node: " + ", ".join(f"{n}: {c} partitions" for n, c in counts.items()))
        if not moves:
            click.echo("balanced: every master holds its share of the partitions, give or take one")
        for m in moves:
            click.echo(f"move partition {m.partition} (slot {m.slot}) from {m.source} to {m.target}")
    if moves and not yes:
        if not as_json:
            click.echo("(nothing moved: add --yes to move them)")
        return
    for m in moves:
        moved = move_slot(server, m.slot, m.source, m.target)
        if not as_json:
            click.echo(f"moved partition {m.partition} (slot {m.slot}, {moved} keys) to {m.target}")
