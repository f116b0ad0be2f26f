"""The ``crawlhub`` command: watch and steer a crawl, manage the embedded servers.

Run it from the project directory (it reads the project's settings, so
REDIS_URL / MONGO_URI and the rest apply as they do to ``scrapy crawl``).
"""

from __future__ import annotations

import json
import sys
import time

import click

from crawlhub import services
from crawlhub.addon import tool_settings
from crawlhub.config import redact_url
from crawlhub.frontier.leases import Frontier, Keys, domain_of
from crawlhub.ops import (
    cluster_status,
    existing_spider_keys,
    format_entry,
    format_status,
    html_report,
    log_entry,
    matches,
    read_log,
    report_data,
    spider_keys,
    worker_rows,
)
from crawlhub.proxies import format_health, proxy_health
from crawlhub.seeds import BadSeed, parse_seed
from crawlhub.stats import log_key


class ServiceDown(click.ClickException):
    """Redis (or another service) cannot be reached: exit code 3."""

    exit_code = 3


class BadInput(click.ClickException):
    """An unknown spider, a bad URL or seed: exit code 2 (like a usage error)."""

    exit_code = 2


def _settings():
    return tool_settings()


def _redis():
    from crawlhub.connection import Unreachable, connect_redis

    settings = _settings()
    settings.set("REDIS_STARTUP_WAIT", min(settings.getfloat("REDIS_STARTUP_WAIT"), 3))
    settings.set("REDIS_RETRIES", min(settings.getint("REDIS_RETRIES"), 2))
    try:
        return connect_redis(settings)
    except (Unreachable, services.ServiceError) as exc:
        raise ServiceDown(str(exc)) from None


def known_spiders(settings) -> list[str]:
    from scrapy.spiderloader import get_spider_loader

    return sorted(get_spider_loader(settings).list())


def _spider(name: str) -> str:
    """The spider name, if the project has such a spider (else exit 2 with the list)."""
    known = known_spiders(_settings())
    if name not in known:
        raise BadInput(f"unknown spider {name!r}; this project's spiders: {', '.join(known)}")
    return name


def _check_spider(ctx, param, value):
    return _spider(value) if value is not None else None


def _spider_or_leftover(ctx, param, value):
    """A spider of the project, or one that no longer exists but left keys in Redis (to clean them)."""
    if value is None or value in known_spiders(_settings()):
        return value
    if any(_redis().scan_iter(f"{value}:*", count=1000)):
        return value
    return _spider(value)


def shown_seed(text: str, most: int = 200) -> str:
    """A stored seed as it was pushed: undecodable bytes as single \\xNN escapes (the record keeps
    them that way), control characters escaped, quoted, cut at ``most``."""
    cut = text[:most] + ("..." if len(text) > most else "")
    return "'" + "".join(c if c.isprintable() or c == "\\" else c.encode("unicode_escape").decode() for c in cut) + "'"


def _frontier(server, settings, spider: str) -> Frontier:
    return Frontier(server, Keys.for_spider(settings, spider), spider)


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
    settings = _settings()
    home = services.home_dir(settings.get("CRAWLHUB_HOME"))
    for service in services.services(home, settings):
        url = service.ensure()
        click.echo(f"{service.name:6} up   {url}  (data: {service.dir})")
    click.echo(f"seed a crawl: {services.seed_command(services.services(home, settings)[0].url(), 'SPIDER:start_urls')}")


@services_group.command("down")
def services_down():
    """Stop the embedded servers; their data stays."""
    settings = _settings()
    home = services.home_dir(settings.get("CRAWLHUB_HOME"))
    for service in services.services(home, settings):
        click.echo(f"{service.name:6} {'stopped' if service.stop() else 'was not running'}")


@services_group.command("status")
def services_status():
    """Show whether the embedded servers run, where, and the URLs in use."""
    settings = _settings()
    home = services.home_dir(settings.get("CRAWLHUB_HOME"))
    for service in services.services(home, settings):
        s = service.status()
        click.echo(f"{s['service']:6} {'running' if s['running'] else 'stopped':8} {s['url'] or '-'}  (data: {s['data']})")
    click.echo(f"REDIS_URL = {redact_url(settings.get('REDIS_URL')) or '(unset: embedded)'}")
    click.echo(f"MONGO_URI = {redact_url(settings.get('MONGO_URI')) or '(unset: embedded)'}")


# -- crawl control ----------------------------------------------------------------
@main.command()
@click.argument("spider", required=False, callback=_check_spider)
@click.option("--json", "as_json", is_flag=True, help="Print JSON (the fields are documented in docs/cli.md).")
@click.option("--watch", is_flag=True, help="Redraw in place every --interval seconds (Ctrl-C to stop).")
@click.option("--interval", default=2.0, show_default=True, help="Seconds between redraws with --watch.")
def status(spider, as_json, watch, interval):
    """The crawl of SPIDER (or of every spider with a frontier): queue, in flight, rates, domains, workers, items, proxies."""
    settings = _settings()
    server = _redis()
    names = [spider] if spider else [n for n in known_spiders(settings)
                                               if server.exists(f"{n}:workers", f"{n}:start_urls", f"{n}:queued")]

    def collect():
        return [cluster_status(server, settings, n, with_items=bool(spider)) for n in names]

    if not watch:
        data = collect()
        if as_json:
            click.echo(json.dumps(data[0] if spider else data, indent=2))
        elif not data:
            click.echo("no spider has a frontier in this Redis yet")
        for one in ([] if as_json else data):
            click.echo("\n".join(format_status(one)))
        return
    from rich.console import Console
    from rich.live import Live
    from rich.text import Text

    def frame() -> str:
        text = "\n\n".join("\n".join(format_status(one)) for one in collect()) or "no spider has a frontier yet"
        return f"{time.strftime('%H:%M:%S')}  (every {interval:g}s, Ctrl-C to stop)\n\n{text}"

    def render():
        return Text(frame())

    if not sys.stdout.isatty():  # piped or logged: one frame after another, each ended by a blank line
        try:
            while True:
                click.echo(frame() + "\n", nl=True)
                sys.stdout.flush()
                time.sleep(interval)
        except KeyboardInterrupt:
            return
    with Live(render(), console=Console(), auto_refresh=False, transient=False) as live:
        try:
            while True:
                time.sleep(interval)
                live.update(render(), refresh=True)
        except KeyboardInterrupt:
            pass


@main.command()
@click.argument("spider", callback=_check_spider)
@click.option("--max-age", type=float, help="Seconds since the last heartbeat [default: WORKER_DEAD_AFTER, else 3 heartbeats].")
@click.option("--any-host", is_flag=True, help="Healthy if any worker of the cluster is alive, not only one on this host.")
def health(spider, max_age, any_host):
    """Exit 0 if a worker of SPIDER on this host is sending heartbeats, else 1 (for health checks and probes)."""
    import socket

    settings = _settings()
    server = _redis()
    now = time.time()
    dead_after = max_age or settings.getfloat("WORKER_DEAD_AFTER") or 3 * settings.getfloat("WORKER_HEARTBEAT_INTERVAL")
    host = socket.gethostname()
    workers = [w for w in worker_rows(server.hgetall(spider_keys(settings, spider)["workers"]), now, dead_after)
               if any_host or w.get("host") == host]
    alive = [w for w in workers if w["alive"]]
    if not alive:
        where = "in the cluster" if any_host else f"on {host}"
        click.echo(f"unhealthy: no worker of {spider} {where} sent a heartbeat in the last {dead_after:g}s", err=True)
        sys.exit(1)
    click.echo(f"healthy: {', '.join(w['worker'] for w in alive)} (last heartbeat "
               f"{min(now - w['last_beat'] for w in alive):.0f}s ago)")


@main.command()
@click.argument("spider", callback=_check_spider)
def pause(spider):
    """Stop every worker of SPIDER leasing new requests (they stay up; in-flight pages finish)."""
    server = _redis()
    key = spider_keys(_settings(), spider)["paused"]
    server.set(key, json.dumps({"at": time.time()}))
    click.echo(f"{spider} paused: workers take no new requests within FRONTIER_POLL_INTERVAL; `crawlhub resume {spider}`")


@main.command()
@click.argument("spider", callback=_check_spider)
def resume(spider):
    """Let SPIDER's workers lease again after `crawlhub pause`."""
    server = _redis()
    key = spider_keys(_settings(), spider)["paused"]
    click.echo(f"{spider} resumed" if server.delete(key) else f"{spider} was not paused")


@main.command()
@click.argument("spider", callback=_check_spider)
@click.option("--follow", "-f", is_flag=True, help="Keep printing new attempts as they come.")
@click.option("--status", "status_filter", help="Only these: 200, 4xx, 5xx, error...")
@click.option("--domain", help="Only this domain (host[:port]).")
@click.option("--limit", "-n", default=50, show_default=True, help="Attempts to show (before following).")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
def log(spider, follow, status_filter, domain, limit, as_json):
    """The audit log: every download attempt of SPIDER (time, status or error, latency, bytes, worker, URL, proxy)."""
    server = _redis()

    def show(entry):
        click.echo(json.dumps(entry) if as_json else format_entry(entry))

    entries, last_id = read_log(server, spider, limit, status_filter, domain)
    for entry in entries:
        show(entry)
    while follow:
        got = server.xread({log_key(spider): last_id}, block=2000, count=500)
        for _, batch in got or []:
            for entry_id, fields in batch:
                last_id = entry_id
                entry = log_entry(fields)
                if matches(entry, status_filter, domain):
                    show(entry)


@main.command()
@click.argument("spider", callback=_check_spider)
@click.option("--html", "path", required=True, type=click.Path(dir_okay=False), help="Where to write the report.")
def report(spider, path):
    """A self-contained HTML report of SPIDER's crawl: pages/min, status codes, latency per domain, items."""
    settings = _settings()
    server = _redis()
    page = html_report(report_data(server, settings, spider))
    with open(path, "w", encoding="utf-8") as out:
        out.write(page)
    click.echo(f"report of {spider} written to {path} ({len(page):,} bytes)")


# -- proxies and header profiles ------------------------------------------------------
@main.group("proxies", invoke_without_command=True)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
def proxies_group(ctx, as_json):
    """Each proxy's health (ok / cooling until T / dead), success rate, and each domain's pool."""
    if ctx.invoked_subcommand is not None:
        return
    health = proxy_health(_redis())
    if as_json:
        click.echo(json.dumps(health, indent=2))
    elif not health["proxies"]:
        click.echo("no proxy has been used yet (PROXY_POOLS, PROXY_FILE)")
    else:
        for line in format_health(health):
            click.echo(line)


@proxies_group.command("reset")
@click.option("--domain", help="Only this domain's cool-downs, strikes and pool.")
def proxies_reset(domain):
    """Forget cool-downs, dead marks, failure counts and escalations (all, or one domain's)."""
    from crawlhub import proxies as p

    server = _redis()
    domains = [domain] if domain else [d.decode() for d in server.smembers(p.DOMAINS)]
    keys = [k for d in domains for k in (p.cool_key(d), p.strikes_key(d), p.tier_key(d))]
    keys += [k.decode() for d in domains for k in server.scan_iter(f"crawlhub:proxy:tierbans:{d}:*", count=1000)]
    if domain:
        server.srem(p.DOMAINS, domain)
    else:
        keys += [p.DEAD, p.HEALTH, p.DOMAINS, p.STICKY]
    removed = server.delete(*keys) if keys else 0
    click.echo(f"proxy state reset for {domain or 'every domain'} ({removed} keys removed)")


@main.group("profiles")
def profiles_group():
    """The browser header profiles (crawlhub/data/browser_profiles.json)."""


@profiles_group.command("list")
def profiles_list():
    """Every profile: id, family, OS and User-Agent."""
    from crawlhub.profiles import load_profiles

    for p in load_profiles(_settings().get("HEADER_PROFILES_FILE") or None):
        ua = {k.lower(): v for k, v in p.headers}["user-agent"]
        click.echo(f"{p.id:22} {p.family:8} {p.os:8} {ua}")


@profiles_group.command("check")
@click.argument("path", required=False)
def profiles_check(path):
    """Check a profile file (default: the one in use): every set coherent, ids unique."""
    from crawlhub.profiles import ProfileError, load_profiles

    try:
        found = load_profiles(path or _settings().get("HEADER_PROFILES_FILE") or None)
    except ProfileError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"{len(found)} profiles, all coherent: " + ", ".join(sorted({f'{p.family}/{p.os}' for p in found})))


@profiles_group.command("capture")
@click.option("--port", default=8765, show_default=True, help="Port on 127.0.0.1 to listen on.")
@click.option("--count", default=1, show_default=True, help="Navigations to capture before stopping.")
def profiles_capture(port, count):
    """Print a real browser's navigation headers as a profile entry: open http://127.0.0.1:PORT/ in it."""
    from crawlhub.profiles import capture_profiles

    click.echo(f"open http://127.0.0.1:{port}/ in the browser to capture (Ctrl-C to stop)", err=True)
    for entry in capture_profiles(port, count):
        click.echo(json.dumps(entry))


@main.command()
@click.argument("spider", callback=_check_spider)
@click.argument("seeds", nargs=-1)
@click.option("--file", "file", type=click.File("r"), help="Seeds, one per line (URL or JSON object); - = stdin.")
@click.option("--priority", type=int, help="Priority of the seeds (a URL becomes {\"url\": ..., \"priority\": N}).")
def seed(spider, seeds, file, priority):
    """Push SEEDS (URLs or JSON objects) to SPIDER's start_urls; all are checked first, and none is pushed if one is bad."""
    settings = _settings()
    raws = list(seeds) + ([line.strip() for line in file if line.strip() and not line.startswith("#")] if file else [])
    if not raws:
        raise BadInput("no seeds given (arguments or --file)")
    good, bad = [], []
    for raw in raws:
        try:
            parsed = parse_seed(raw, settings.getint("SEED_MAX_BYTES"))
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
    server = _redis()
    key = spider_keys(settings, spider)["seeds"]
    server.lpush(key, *good)
    click.echo(f"pushed {len(good)} seed(s) to {key}")


@main.command("bad-seeds")
@click.argument("spider", callback=_check_spider)
@click.option("--limit", default=20, show_default=True)
@click.option("--clear", is_flag=True, help="Delete them after printing.")
def bad_seeds(spider, limit, clear):
    """List the seeds SPIDER refused, with the reasons."""
    server = _redis()
    key = spider_keys(_settings(), spider)["bad_seeds"]
    for raw in server.lrange(key, 0, limit - 1):
        record = json.loads(raw)
        click.echo(f"{record['reason']}: {shown_seed(record['seed'])}")
    if clear:
        server.delete(key)
        click.echo(f"cleared {key}")


@main.command()
@click.argument("spider", callback=_spider_or_leftover)
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
def reset(spider, yes):
    """Delete SPIDER's whole crawl state: seeds, queue, dupefilter, in flight, DLQ, stats, audit log, workers."""
    server = _redis()
    settings = _settings()
    keys = existing_spider_keys(server, settings, spider)
    present = [k for k in keys if server.exists(k)]
    if not yes and not click.confirm(f"Delete {len(present)} key(s) of {spider} (queue, dupefilter, in flight, DLQ, "
                                     f"stats, audit log, workers)?", default=False):
        click.echo("nothing deleted")
        sys.exit(1)
    removed = server.delete(*keys) if keys else 0
    click.echo(f"deleted {removed} key(s) of {spider}")


# -- dead letters ------------------------------------------------------------------
@main.group()
def dlq():
    """Requests that failed after their last attempt (<spider>:dlq)."""


def _dlq_entries(server, key):
    return [(raw, json.loads(raw)) for raw in server.lrange(key, 0, -1)]


@dlq.command("list")
@click.argument("spider", callback=_check_spider)
@click.option("--limit", default=50, show_default=True)
def dlq_list(spider, limit):
    """One line per dead letter: index, URL, attempts, last status or error."""
    server = _redis()
    entries = _dlq_entries(server, spider_keys(_settings(), spider)["dlq"])
    for index, (_, rec) in enumerate(entries[:limit]):
        last = f"HTTP {rec['status']}" if rec.get("status") else rec.get("error", "")
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(rec["last_attempt"]))
        click.echo(f"{index:4}  {rec['url']}  attempts={rec['attempts']}  {last[:120]}  last {when}")
    click.echo(f"{len(entries)} dead letter(s)")


@dlq.command("show")
@click.argument("spider", callback=_check_spider)
@click.argument("index", type=int)
def dlq_show(spider, index):
    """The whole record of dead letter INDEX (from `dlq list`)."""
    entries = _dlq_entries(_redis(), spider_keys(_settings(), spider)["dlq"])
    if not 0 <= index < len(entries):
        raise click.ClickException(f"no dead letter {index}: there are {len(entries)}")
    record = dict(entries[index][1])
    record["request"] = json.loads(record["request"])
    click.echo(json.dumps(record, indent=2, ensure_ascii=False))


@dlq.command("requeue")
@click.argument("spider", callback=_check_spider)
@click.argument("indexes", type=int, nargs=-1)
@click.option("--all", "everything", is_flag=True, help="Requeue every dead letter.")
def dlq_requeue(spider, indexes, everything):
    """Put dead letters back in the queue with their attempts reset."""
    if not indexes and not everything:
        raise click.UsageError("name the INDEXES to requeue (see `crawlhub dlq list`), or --all")
    server = _redis()
    settings = _settings()
    keys = spider_keys(settings, spider)
    frontier = _frontier(server, settings, spider)
    entries = _dlq_entries(server, keys["dlq"])
    chosen = range(len(entries)) if everything else indexes
    done = 0
    for index in chosen:
        if not 0 <= index < len(entries):
            raise click.ClickException(f"no dead letter {index}: there are {len(entries)}")
        raw, record = entries[index]
        request = json.loads(record["request"])
        meta = request.get("meta", {})
        for key in ("crawlhub_attempts", "crawlhub_first_attempt", "crawlhub_expiries"):
            meta.pop(key, None)
        request["dont_filter"] = True
        payload = json.dumps(request, separators=(",", ":"), ensure_ascii=False)
        # first queued, then removed: a crash in between leaves a duplicate letter, never a lost one
        frontier.push(payload, int(request.get("priority", 0)), domain_of(record["url"]))
        done += server.lrem(keys["dlq"], 1, raw)
        click.echo(f"requeued {record['url']}")
    click.echo(f"{done} request(s) back in {keys['queue']}:<domain>")


@dlq.command("purge")
@click.argument("spider", callback=_check_spider)
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
def dlq_purge(spider, yes):
    """Delete all of SPIDER's dead letters."""
    server = _redis()
    key = spider_keys(_settings(), spider)["dlq"]
    count = server.llen(key)
    if not yes:
        click.confirm(f"Delete {count} dead letter(s) in {key}?", abort=True)
    server.delete(key)
    click.echo(f"deleted {count} dead letter(s)")


@main.command()
@click.argument("spider", callback=_check_spider)
@click.argument("pages", type=int, required=False)
@click.option("--clear", is_flag=True, help="Remove the run-time budget (CRAWL_BUDGET applies again).")
@click.option("--reset-used", is_flag=True, help="Start counting used requests from 0 again.")
def budget(spider, pages, clear, reset_used):
    """Show or set SPIDER's cluster-wide crawl budget (requests the cluster may take)."""
    server = _redis()
    settings = _settings()
    keys = spider_keys(settings, spider)
    if clear:
        server.delete(keys["budget"])
    elif pages is not None:
        if pages < 0:
            raise click.BadParameter("must be 0 (no limit) or more", param_hint="PAGES")
        server.set(keys["budget"], pages)
    if reset_used:
        server.delete(keys["budget_used"])
    limit = server.get(keys["budget"])
    limit = int(limit) if limit is not None else _settings().getint("CRAWL_BUDGET")
    used = int(server.get(keys["budget_used"]) or 0)
    queued = sum(_frontier(server, settings, spider).queued().values())
    click.echo(f"budget of {spider}: {limit or 'no limit'}; {used} requests taken; {queued} queued")


# -- politeness --------------------------------------------------------------------
@main.group()
def limits():
    """Per-domain rate and concurrency for the whole cluster (docs/politeness.md)."""


@limits.command("set")
@click.argument("domain")
@click.argument("rate", required=False)
@click.option("--concurrency", type=int, help="Downloads at once from all workers (0 = no limit).")
def limits_set(domain, rate, concurrency):
    """Limit DOMAIN to RATE (5/s, 30/m, 100/h, none) and/or --concurrency N; every worker applies it on its next lease."""
    from crawlhub.frontier.politeness import BadLimit, set_limit

    if rate is None and concurrency is None:
        raise click.UsageError("give a RATE, --concurrency N, or both")
    try:
        limit = set_limit(_redis(), _domain(domain), rate, concurrency)
    except BadLimit as exc:
        raise click.BadParameter(str(exc)) from None
    click.echo(f"{_domain(domain)}: {_limit_text(limit)}")


@limits.command("clear")
@click.argument("domain")
def limits_clear(domain):
    """Remove DOMAIN's run-time limit (the settings apply again)."""
    from crawlhub.frontier.politeness import clear_limit

    removed = clear_limit(_redis(), _domain(domain))
    click.echo(f"{_domain(domain)}: {'run-time limit removed' if removed else 'had no run-time limit'}")


@limits.command("show")
@click.argument("domains", nargs=-1)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def limits_show(domains, as_json):
    """Each domain's limit, current rate, slow-down and robots.txt state."""
    from crawlhub.downloadermiddlewares.robots import robots_state
    from crawlhub.frontier.politeness import (
        Politeness,
        domain_state,
        format_rate,
        get_limit,
        known_domains,
    )

    settings = _settings()
    server = _redis()
    defaults = Politeness.from_settings(server, settings)
    rows = []
    for domain in [_domain(d) for d in domains] or known_domains(server):
        runtime = get_limit(server, domain)
        configured = (defaults.domains or {}).get(domain)
        limit = {"rate": defaults.rate, "concurrency": defaults.concurrency}
        limit.update(configured or {})
        limit.update(runtime or {})
        row = domain_state(server, domain)
        row.update(limit=limit, source="run time" if runtime else "settings" if configured else "default")
        row["robots"] = {o: r for o in (f"http://{domain}", f"https://{domain}") if (r := robots_state(server, o))}
        rows.append(row)
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
        click.echo(
            f"{row['domain']:32} limit {format_rate(row['limit']['rate']):>9} x{row['limit']['concurrency'] or '∞'} "
            f"({row['source']})  now {row['rate_now']:g}/s, {row['active']} active  " + "; ".join(extra)
        )


def _domain(value: str) -> str:
    """A domain as crawlhub keys it; a URL is accepted too."""
    return domain_of(value if "://" in value else f"http://{value}")


def _limit_text(limit: dict) -> str:
    from crawlhub.frontier.politeness import format_rate

    parts = []
    if "rate" in limit:
        parts.append(f"rate {format_rate(limit['rate'])}")
    if "concurrency" in limit:
        parts.append(f"concurrency {limit['concurrency'] or 'no limit'}")
    return ", ".join(parts)


if __name__ == "__main__":
    main()
