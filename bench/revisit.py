"""Continuous crawling's costs: the URL status store on vs off, its size, and the refresher's rate.

1. The crawl of bench/frontier.py (its generated site and spider, one worker,
   CONCURRENT_REQUESTS=32), items stored in MongoDB (the embedded
   SecantusDB), run alternately with the spider one-shot (store off) and
   revisiting every page daily (store on: a status document per page, written
   with the items' flushes), --repeat rounds; medians.
2. MongoDB bytes per URL in the status store (BSON size of a document; the
   server's collStats when it has them).
3. The refresher's rate: --stored status documents, all due, moved into the
   Redis frontier by the refresher's own calls (StatusStore.due, the refresh
   script, StatusStore.queued) in REFRESH_BATCH batches, for --refresh-seconds.
4. A revisit's gone check (a page's items not seen in its fetch marked) on an
   item collection of --gone-items, without and with the index on source_url.

    .venv/bin/python -m bench.revisit                 # 5,000 pages, 3 rounds; 1,000,000 stored URLs
    .venv/bin/python -m bench.revisit --quick         # 1,500 pages, 2 rounds; 100,000 stored URLs
    .venv/bin/python -m bench.revisit --gone-only     # 4. only a revisit's gone check, 100,000 items, with and
                                                      #    without the index on source_url (--gone-items N)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.frontier import ROOT, SPIDER, median_run, run_crawl


def crawl_rounds(server, mongo, base: str, redis_url: str, mongo_uri: str, rounds: int) -> dict[str, list[dict]]:
    runs: dict[str, list[dict]] = {"off": [], "on": []}
    order = ["off", "on"]
    for round_ in range(rounds):
        for mode in order if round_ % 2 == 0 else order[::-1]:
            server.flushall()
            mongo.drop_database("bench")
            server.lpush(f"{SPIDER}:start_urls", f"{base}/p/0")
            os.environ["BENCH_MONGO_URI"] = mongo_uri
            os.environ["BENCH_REVISIT"] = "1d" if mode == "on" else ""
            row = run_crawl("crawlhub", f"{base}/p/0", redis_url)
            row["status_docs"] = mongo.bench.url_status.count_documents({})
            if mode == "on":
                row["size"] = bytes_per_url(mongo)
            runs[mode].append(row)
            print(f"round {round_ + 1}  status store {mode:3}  {row['pages']} pages in {row['seconds']:.1f}s = "
                  f"{row['pages_per_s']:.1f} pages/s ({row['status_docs']} status documents)", flush=True)
    return runs


def bytes_per_url(mongo) -> dict[str, float]:
    import bson

    coll = mongo.bench.url_status
    docs = list(coll.find().limit(1000))
    out = {"bson": sum(len(bson.encode(d)) for d in docs) / max(1, len(docs))}
    try:
        stats = mongo.bench.command("collStats", "url_status")
        count = max(1, stats.get("count", 0))
        out["storage"] = stats.get("storageSize", 0) / count
        out["indexes"] = stats.get("totalIndexSize", 0) / count
    except Exception as exc:  # noqa: BLE001 - a server without collStats: the BSON size only
        out["note"] = f"collStats unavailable ({type(exc).__name__})"
    return out


def refresher_rate(server, mongo, stored: int, seconds: float, batch: int, due_share: float) -> dict[str, float]:
    """``stored`` status documents of which ``due_share`` are due (the rest in the next day): URLs queued per second."""
    from pymongo import InsertOne
    from scrapy.settings import Settings

    from crawlhub.extensions.refresher import revisit_page
    from crawlhub.frontier.keys import Keys
    from crawlhub.frontier.operations import FrontierOps
    from crawlhub.revisit.store import DueScanner, StatusStore
    from tests.helpers import project_settings

    server.flushall()
    mongo.drop_database("bench")
    coll = mongo.bench.url_status
    store = StatusStore(coll)
    store.ensure_indexes()
    now = time.time()
    started = time.monotonic()
    for start in range(0, stored, 10000):
        coll.bulk_write([InsertOne({
            "_id": f"{SPIDER}:{i:040x}", "spider": SPIDER, "fp": f"{i:040x}", "url": f"http://127.0.0.1/p/{i}",
            "domain": f"d{i % 50}.test", "request": json.dumps({"url": f"http://127.0.0.1/p/{i}", "dont_filter": True}),
            "first_fetch": now - 86400, "last_fetch": now - 86400, "last_status": 200, "etag": f'"{i:x}"',
            "last_modified": None, "signature": f"{i:040x}", "interval": 86400.0,
            "next_fetch": now - 1 - (i % 3600) if i < stored * due_share else now + 3600 + (i % 86400),
            "fetches": 1}) for i in range(start, min(stored, start + 10000))], ordered=False)
    loaded = time.monotonic() - started
    ops = FrontierOps(server, Keys.for_spider(Settings(project_settings()), SPIDER), SPIDER)
    scanner = DueScanner(store, SPIDER, batch)  # the refresher's own walk over the due pages
    moved, started = 0, time.monotonic()
    while time.monotonic() - started < seconds:
        t = time.time()
        due = scanner.next_batch(t)
        if not due:
            break
        pages = [revisit_page(d) for d in due]
        moved += len(ops.refresh(pages))
        store.queued([(d["_id"], d["next_fetch"]) for d in due], t, 86400)
    elapsed = time.monotonic() - started
    return {"stored": stored, "due": int(stored * due_share), "load_seconds": loaded, "moved": moved, "seconds": elapsed, "per_second": moved / elapsed,
            "queued": int(sum(int(v) for v in server.hvals(f"{SPIDER}:queued")))}


def gone_checks(mongo, items: int, per_page: int, checks: int) -> dict[str, float]:
    """A revisit's gone check (GoneCheck.mark: the page's items older than its fetch) on a collection of ``items``
    items, ``per_page`` a page: ms a check without an index on source_url, then with it (MongoWriter makes it)."""
    from datetime import datetime, timedelta, timezone

    from crawlhub.revisit.store import GoneCheck

    coll = mongo["bench"]["gone_items"]
    coll.drop()
    seen = datetime.now(timezone.utc) - timedelta(hours=1)
    pages = max(1, items // per_page)
    started = time.monotonic()
    for low in range(0, items, 10_000):
        coll.insert_many([{"id": str(n), "source_url": f"https://shop.test/shop/page/{n // per_page}/", "last_seen": seen,
                           "name": f"product {n}", "price": "1.00"} for n in range(low, min(items, low + 10_000))])
    out: dict[str, float] = {"items": items, "load_seconds": time.monotonic() - started}
    fetched = datetime.now(timezone.utc).timestamp()
    for label in ("no_index", "index"):
        if label == "index":
            coll.create_index("source_url", name="source_url")
        times = []
        for i in range(checks):  # every item of the page was seen before the fetch: the check marks them all,
            page = f"https://shop.test/shop/page/{(i * 7919) % pages}/"  # as if the page now lists none
            begin = time.perf_counter()
            marked = GoneCheck(page, fetched).mark(coll, datetime.now(timezone.utc))
            times.append(time.perf_counter() - begin)
            assert marked in (0, per_page), marked
        times.sort()
        out[label] = times[len(times) // 2] * 1000
    coll.drop()
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=5000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--stored", type=int, default=1_000_000, help="status documents for the refresher's rate")
    parser.add_argument("--refresh-seconds", type=float, default=30.0)
    parser.add_argument("--batch", type=int, default=500, help="REFRESH_BATCH")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--refresher-only", action="store_true", help="only the refresher's rate")
    parser.add_argument("--gone-only", action="store_true", help="only a revisit's gone check, with and without its index")
    parser.add_argument("--gone-items", type=int, default=100_000, help="items in the collection the gone check reads")
    args = parser.parse_args(argv)
    if args.quick:
        args.pages, args.repeat, args.stored, args.refresh_seconds = 1500, 2, 100_000, 10.0
    import pymongo
    import redis

    from crawlhub.services import EmbeddedMongo, EmbeddedRedis

    home = Path(tempfile.mkdtemp(prefix="bench-revisit-"))
    redis_server, mongo_server = EmbeddedRedis(home), EmbeddedMongo(home)
    redis_url, mongo_uri = redis_server.ensure(), mongo_server.ensure()
    site = subprocess.Popen([sys.executable, "-m", "bench.site", "--pages", str(args.pages)], cwd=ROOT,
                            stdout=subprocess.PIPE, text=True)
    try:
        base = f"http://127.0.0.1:{int(site.stdout.readline().split()[1])}"
        server, mongo = redis.Redis.from_url(redis_url), pymongo.MongoClient(mongo_uri)
        if args.gone_only:
            gone = gone_checks(mongo, args.gone_items, 16, 50)
            print(f"a revisit's gone check on {gone['items']:,} items (loaded in {gone['load_seconds']:.0f}s), median "
                  f"of 50: {gone['no_index']:.1f} ms without an index on source_url, {gone['index']:.2f} ms with it")
            return 0
        print(f"site: {args.pages} pages; one crawlhub worker, CONCURRENT_REQUESTS=32, items to MongoDB (SecantusDB)")
        if not args.refresher_only:
            runs = crawl_rounds(server, mongo, base, redis_url, mongo_uri, args.repeat)
            off, on = median_run(runs["off"]), median_run(runs["on"])
            print(f"\nmedian pages/s: status store off {off['pages_per_s']:.1f}, on {on['pages_per_s']:.1f}: "
                  f"{on['pages_per_s'] / off['pages_per_s']:.3f}x (goal >= 0.9)")
            size = on["size"]
            print("status store per URL: " + ", ".join(f"{k} {v:.0f} B" if isinstance(v, float) else f"{k}: {v}"
                                                       for k, v in size.items()))
        for share in (0.01, 1.0):
            rate = refresher_rate(server, mongo, args.stored, args.refresh_seconds, args.batch, share)
            print(f"refresher: {rate['stored']:,} stored URLs (loaded in {rate['load_seconds']:.0f}s), "
                  f"{share:.0%} due ({rate['due']:,}): {rate['moved']:,} queued in {rate['seconds']:.1f}s = "
                  f"{rate['per_second']:,.0f} URLs/s (batches of {args.batch}; {rate['queued']:,} in the frontier's queues)",
                  flush=True)
    finally:
        os.environ.pop("BENCH_MONGO_URI", None)
        os.environ.pop("BENCH_REVISIT", None)
        site.terminate()
        site.wait()
        redis_server.stop()
        mongo_server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
