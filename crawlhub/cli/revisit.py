"""``crawlhub recrawl`` and ``crawlhub schedule``: continuous crawling's URL status store (docs/revisit.md)."""

from __future__ import annotations

import json

import click

from crawlhub.cli._common import BadInput, ServiceDown, check_spider, settings, spider_class
from crawlhub.revisit.policy import BadDuration, parse_duration
from crawlhub.revisit.store import StatusStore


def _store() -> StatusStore:
    from pymongo.errors import PyMongoError

    from crawlhub.connection import get_mongo, mongo_error

    current = settings()
    client = get_mongo(current, server_selection_timeout_ms=3000)
    try:
        client.admin.command("ping")
    except PyMongoError as exc:
        raise ServiceDown(f"cannot reach MongoDB: {mongo_error(exc)}") from None
    return StatusStore.of(client, current)


@click.command()
@click.argument("spider", callback=check_spider)
@click.option("--all", "everything", is_flag=True, help="Every stored page of SPIDER.")
@click.option("--prefix", help="Pages whose URL starts with this.")
@click.option("--older-than", help="Pages last fetched longer ago than this (90s, 15m, 6h, 2d).")
def recrawl(spider: str, everything: bool, prefix: str | None, older_than: str | None) -> None:
    """Make SPIDER's stored pages due now (all, under a URL prefix, or not fetched for a while)."""
    if not (everything or prefix or older_than):
        raise click.UsageError("say which pages: --all, --prefix URL or --older-than DURATION")
    try:
        age = parse_duration(older_than) if older_than else None
    except BadDuration as exc:
        raise BadInput(str(exc)) from None
    store = _store()
    made = store.make_due(spider, prefix=prefix, older_than=age)
    if not made and not store.collection.count_documents({"spider": spider}, limit=1):
        # a one-shot spider keeps no status store: saying "0 pages due" would look like a recrawl that did nothing
        raise BadInput(f"{spider} has no page in the URL status store ({store.collection.name}): it is one-shot "
                       f"(no revisit policy, docs/revisit.md) or has fetched nothing yet; nothing was made due. To "
                       f"crawl it anew: `crawlhub reset {spider} --yes`, then seed it again")
    click.echo(f"{made} page(s) of {spider} due now; the refresher queues them within REFRESH_INTERVAL")


def _revisits(spider: str) -> bool:
    """Whether the project's spider declares a revisit policy (crawlhub.revisit.policy reads these attributes)."""
    found = spider_class(spider)
    return found is not None and any(getattr(found, name, None) for name in ("revisit", "revisit_rules", "sitemap_revisit"))


@click.command()
@click.argument("spider", callback=check_spider)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def schedule(spider: str, as_json: bool) -> None:
    """SPIDER's revisit schedule: pages due now, in the next hour and day; freshness; changes and unchanged fetches."""
    data = _store().schedule(spider)
    if as_json:
        click.echo(json.dumps(data, indent=2))
        return
    age = data["age_seconds"]
    click.echo(f"{spider}: {data['urls']} pages in the status store")
    if not data["urls"] and not _revisits(spider):  # a one-shot spider: say so, not only "0 pages"
        click.echo(f"  {spider} does not revisit its pages (no `revisit` or `revisit_rules` attribute): it is "
                   "one-shot and keeps no status store. To crawl it continuously, declare `revisit = \"1d\"` (or "
                   "`revisit_rules`) on the spider: docs/revisit.md")
        return
    click.echo(f"  due now {data['due_now']}, in the next hour {data['due_next_hour']}, "
               f"in the next day {data['due_next_day']}")
    if data["urls"]:
        click.echo(f"  age of the last fetch: median {age['p50']:g}s, 90% under {age['p90']:g}s, oldest {age['max']:g}s")
    click.echo(f"  {data['fetches']} fetches: {data['changes']} found a change, {data['unchanged']} found none")
    if data["missing"]:
        click.echo(f"  {data['missing']} item(s) missing from their pages' last revisits wait (REVISIT_GONE_DELAY): "
                   f"marked gone from {data['missing_gone_from']} unless seen again")
    if data["missing_overdue"]:
        click.echo(f"  {data['missing_overdue']} of them waited past their end: gone for exports already, marked "
                   "gone when a worker of the spider runs")
    if data["redirected"]:
        click.echo(f"  {data['redirected']} page(s) redirected elsewhere at their last fetch (redirected_to; "
                   "docs/revisit.md)")
