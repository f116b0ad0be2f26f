"""The ``crawlhub`` command: watch and steer a crawl, manage the embedded servers.

Run it from the project directory (it reads the project's settings, so
REDIS_URL / MONGO_URI and the rest apply as they do to ``scrapy crawl``).
"""

from __future__ import annotations

import json
import sys
import time

import click
from scrapy.utils.project import get_project_settings

from crawlhub import services
from crawlhub.config import redact_url
from crawlhub.extensions import workers_key
from crawlhub.seeds import BadSeed, parse_seed


def _settings():
    return get_project_settings()


def _redis():
    from crawlhub.connection import Unreachable, connect_redis

    settings = _settings()
    settings.set("REDIS_STARTUP_WAIT", min(settings.getfloat("REDIS_STARTUP_WAIT"), 3))
    try:
        return connect_redis(settings)
    except (Unreachable, services.ServiceError) as exc:
        raise click.ClickException(str(exc)) from None


def spider_keys(settings, spider: str) -> dict[str, str]:
    """Every Redis key crawlhub keeps for a spider (docs/redis-keys.md)."""
    return {
        "seeds": settings.get("REDIS_START_URLS_KEY") % {"name": spider},
        "queue": settings.get("SCHEDULER_QUEUE_KEY") % {"spider": spider},
        "dupefilter": settings.get("SCHEDULER_DUPEFILTER_KEY") % {"spider": spider},
        "bad_seeds": f"{spider}:bad_seeds",
        "bad_requests": f"{spider}:bad_requests",
        "workers": workers_key(spider),
    }


@click.group()
def main():
    """crawlhub: a distributed Scrapy crawl on one Redis frontier."""


# -- services -----------------------------------------------------------------
@main.group("services")
def services_group():
    """The embedded local Redis and MongoDB-wire servers (.crawlhub/)."""


@services_group.command("up")
def services_up():
    """Start the embedded servers (no-op for those already running)."""
    home = services.home_dir(_settings().get("CRAWLHUB_HOME"))
    for service in services.services(home):
        url = service.ensure()
        click.echo(f"{service.name:6} up   {url}  (data: {service.dir})")


@services_group.command("down")
def services_down():
    """Stop the embedded servers; their data stays."""
    home = services.home_dir(_settings().get("CRAWLHUB_HOME"))
    for service in services.services(home):
        click.echo(f"{service.name:6} {'stopped' if service.stop() else 'was not running'}")


@services_group.command("status")
def services_status():
    """Show whether the embedded servers run, where, and the URLs in use."""
    settings = _settings()
    home = services.home_dir(settings.get("CRAWLHUB_HOME"))
    for service in services.services(home):
        s = service.status()
        click.echo(f"{s['service']:6} {'running' if s['running'] else 'stopped':8} {s['url'] or '-'}  (data: {s['data']})")
    click.echo(f"REDIS_URL = {redact_url(settings.get('REDIS_URL')) or '(unset: embedded)'}")
    click.echo(f"MONGO_URI = {redact_url(settings.get('MONGO_URI')) or '(unset: embedded)'}")


# -- crawl control ----------------------------------------------------------------
@main.command()
@click.argument("spider")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def status(spider, as_json):
    """Seeds, queue, seen URLs, bad seeds and workers of SPIDER's crawl."""
    settings = _settings()
    server = _redis()
    keys = spider_keys(settings, spider)
    pipe = server.pipeline(transaction=False)
    pipe.llen(keys["seeds"]).zcard(keys["queue"]).scard(keys["dupefilter"])
    pipe.llen(keys["bad_seeds"]).llen(keys["bad_requests"]).hgetall(keys["workers"])
    seeds, queued, seen, bad_seeds, bad_requests, workers = pipe.execute()
    workers = sorted((json.loads(v) for v in workers.values()), key=lambda w: w["started_at"])
    data = {
        "spider": spider,
        "seeds": seeds,
        "queued": queued,
        "seen": seen,
        "bad_seeds": bad_seeds,
        "bad_requests": bad_requests,
        "workers": workers,
    }
    if as_json:
        click.echo(json.dumps(data, indent=2))
        return
    click.echo(f"spider {spider}: {seeds} seeds waiting, {queued} requests queued, {seen} URLs seen")
    click.echo(f"bad seeds: {bad_seeds}   bad request payloads: {bad_requests}")
    now = time.time()
    for w in workers:
        click.echo(
            f"  {w['worker']:28} {w['state']:9} pages={w['pages']:<6} items={w['items']:<6} "
            f"beat {now - w['last_beat']:.0f}s ago{'  (' + w['reason'] + ')' if w.get('reason') else ''}"
        )


@main.command()
@click.argument("spider")
@click.argument("seeds", nargs=-1, required=True)
def seed(spider, seeds):
    """Push SEEDS (URLs or JSON objects) to SPIDER's start_urls, checking each first."""
    settings = _settings()
    server = _redis()
    key = spider_keys(settings, spider)["seeds"]
    good = []
    for raw in seeds:
        try:
            parse_seed(raw, settings.getint("SEED_MAX_BYTES"))
        except BadSeed as exc:
            click.echo(f"refused {raw[:100]!r}: {exc}", err=True)
            continue
        good.append(raw)
    if good:
        server.lpush(key, *good)
    click.echo(f"pushed {len(good)} seed(s) to {key}")
    if len(good) != len(seeds):
        sys.exit(1)


@main.command("bad-seeds")
@click.argument("spider")
@click.option("--limit", default=20, show_default=True)
@click.option("--clear", is_flag=True, help="Delete them after printing.")
def bad_seeds(spider, limit, clear):
    """List the seeds SPIDER refused, with the reasons."""
    server = _redis()
    key = spider_keys(_settings(), spider)["bad_seeds"]
    for raw in server.lrange(key, 0, limit - 1):
        record = json.loads(raw)
        click.echo(f"{record['reason']}: {record['seed'][:200]!r}")
    if clear:
        server.delete(key)
        click.echo(f"cleared {key}")


@main.command()
@click.argument("spider")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
def reset(spider, yes):
    """Delete SPIDER's whole frontier: seeds, queue, dupefilter, bad lists, workers."""
    keys = list(spider_keys(_settings(), spider).values())
    if not yes:
        click.confirm(f"Delete {', '.join(keys)}?", abort=True)
    removed = _redis().delete(*keys)
    click.echo(f"deleted {removed} key(s) of {spider}")


if __name__ == "__main__":
    main()
