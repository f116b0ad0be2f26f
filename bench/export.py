"""`crawlhub export`: items/s and peak memory per format, next to plain pymongo loops measured in the same run.

A private MongoDB-wire server (secantusd-py, as the tests use) gets N product documents shaped as the
store writes them. Then, each in its own process and each measured by a small launcher (the peak
resident memory of the measured process only):

* `crawlhub export scrapeme -o FILE` in jsonl, json, csv and xml (Scrapy's exporters), at N and at N/4
  (the same peak at both sizes = constant memory);
* the floor: a pymongo cursor written as JSON lines with json.dumps (no Scrapy, no field handling);
* the naive way: `list(collection.find())`, then json.dump (what constant memory avoids).

Run: .venv/bin/python -m bench.export [--items N] [--quick]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LAUNCHER = ("import resource, subprocess, sys; code = subprocess.call(sys.argv[1:]); "
            "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); sys.exit(code)")
FLOOR = """
import json, sys, pymongo
db = pymongo.MongoClient(sys.argv[1])[sys.argv[2]]
with open(sys.argv[3], "w") as out:
    for doc in db.products.find({"spiders": "scrapeme"}, batch_size=500):
        doc.pop("_id")
        out.write(json.dumps(doc, default=str) + "\\n")
"""
NAIVE = """
import json, sys, pymongo
db = pymongo.MongoClient(sys.argv[1])[sys.argv[2]]
docs = list(db.products.find({"spiders": "scrapeme"}, {"_id": 0}))
with open(sys.argv[3], "w") as out:
    json.dump(docs, out, default=str)
"""


def fill(db, n: int) -> None:
    db.products.drop()
    for start in range(0, n, 10_000):
        db.products.insert_many([
            {"site": "shop", "id": str(i), "name": f"Product number {i} with a name of some length",
             "price": f"{i % 9000 / 100:.2f}", "currency": "GBP", "url": f"https://shop.test/product/{i}/",
             "image_urls": [f"https://shop.test/img/{i}-{k}.png" for k in range(3)], "in_stock": i % 7 != 0,
             "source_url": f"https://shop.test/shop/page/{i // 16}/", "spiders": ["scrapeme"],
             "first_seen": datetime.now(timezone.utc), "content_hash": f"{i:040d}"}
            for i in range(start, min(n, start + 10_000))], ordered=False)
    db.products.create_index("spiders")


def measured(cmd: list[str], env: dict) -> tuple[float, float]:
    """(seconds, peak MB) of ``cmd``, its peak read by a launcher forked from a small process."""
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", LAUNCHER, *cmd], cwd=ROOT, env=env, capture_output=True, text=True)
    took = time.perf_counter() - started
    if done.returncode:
        raise SystemExit(f"{cmd} failed: {done.stderr[-2000:]}")
    return took, int(done.stdout.split()[-1]) / 1024


def main() -> None:
    import os

    import pymongo

    from crawlhub.services import EmbeddedMongo

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=200_000)
    parser.add_argument("--quick", action="store_true", help="40,000 items")
    args = parser.parse_args()
    n = 40_000 if args.quick else args.items
    with tempfile.TemporaryDirectory() as home:
        mongo = EmbeddedMongo(Path(home))
        uri = mongo.ensure()
        try:
            db = pymongo.MongoClient(uri).bench_export
            env = {**os.environ, "MONGO_URI": uri, "MONGO_DATABASE": "bench_export", "REDIS_URL": "redis://127.0.0.1:1/0"}
            rows = []
            for size in (n // 4, n):
                fill(db, size)
                for fmt in ("jsonl", "json", "csv", "xml"):
                    out = Path(home) / f"out.{fmt}"
                    took, peak = measured([sys.executable, "-m", "crawlhub.cli", "export", "scrapeme", "-o", str(out),
                                           "--no-progress"], env)
                    rows.append((f"crawlhub export {fmt}", size, took, peak))
                for name, script in (("pymongo cursor + json.dumps (floor)", FLOOR), ("list(find()) + json.dump (naive)", NAIVE)):
                    took, peak = measured([sys.executable, "-c", script, uri, "bench_export", str(Path(home) / "peer")], env)
                    rows.append((name, size, took, peak))
            baseline = measured([sys.executable, "-m", "crawlhub.cli", "--help"], env)[1]
        finally:
            mongo.stop()
    print(f"{'what':40} {'items':>8} {'seconds':>8} {'items/s':>9} {'peak MB':>8}")
    for name, size, took, peak in rows:
        print(f"{name:40} {size:>8,} {took:>8.1f} {size / took:>9,.0f} {peak:>8.1f}")
    print(f"the crawlhub command's own imports (crawlhub --help): {baseline:.1f} MB")
    for fmt in ("jsonl", "json", "csv", "xml"):
        small, big = (peak for name, size, _, peak in rows if name == f"crawlhub export {fmt}")
        print(f"{fmt}: peak {small:.1f} MB at {n // 4:,} items, {big:.1f} MB at {n:,} (x{big / small:.2f} for x4 the items)")


if __name__ == "__main__":
    main()
