"""`crawlhub export`: items/s and peak memory per format, next to plain pymongo loops measured in the same run.

A private MongoDB-wire server (secantusd-py, as the tests use) gets N product documents shaped as the
store writes them. Then, each in its own process and each measured by a small launcher (the peak
resident memory of the measured process only):

* `crawlhub export scrapeme -o FILE` in jsonl, json, csv and xml (Scrapy's exporters), at N and at N/4
  (the same peak at both sizes = constant memory);
* the floor: a pymongo cursor written as JSON lines with json.dumps (no Scrapy, no field handling);
* the naive way: `list(collection.find())`, then json.dump (what constant memory avoids).

With ``--delta``: a daily delta instead (``export --since 1d``, with and without ``--include-gone``) on N items of
which 1% changed and 0.2% were found gone within the day, the store's indexes made (MongoWriter's), next to the
single ``$or`` query the command ran before (read with a bare pymongo cursor: no export cost in it).

Run: .venv/bin/python -m bench.export [--items N] [--quick] [--delta]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

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


OR_QUERY = """
import sys, pymongo
from datetime import datetime, timedelta, timezone
db = pymongo.MongoClient(sys.argv[1])[sys.argv[2]]
now = datetime.now(timezone.utc)
since = now - timedelta(days=1)
query = {"spiders": "scrapeme", "$or": [{"changed_at": {"$gte": since}},
                                         {"changed_at": {"$exists": False}, "last_seen": {"$gte": since}}]}
if sys.argv[4] == "gone":
    query["$or"] += [{"gone_at": {"$gte": since}}, {"gone_at": None, "gone_due": {"$gte": since, "$lte": now}}]
else:
    query["gone_at"] = None
with open(sys.argv[3], "w") as out:
    out.write(str(sum(1 for _ in db.products.find(query, batch_size=500))))
"""


def age(db, n: int) -> None:
    """The documents as a store a week old has them: every one last written a week ago, 1% changed and 0.2% found
    gone within the day; the store's own indexes (MongoWriter.ensure_index)."""
    from datetime import timedelta

    from crawlhub.pipelines.mongo import DELTA_FIELDS

    now = datetime.now(timezone.utc)
    week, hour = now - timedelta(days=7), now - timedelta(hours=1)
    db.products.update_many({}, {"$set": {"changed_at": week, "last_seen": week}})
    db.products.update_many({"id": {"$in": [str(i) for i in range(0, n, 100)]}},
                            {"$set": {"changed_at": hour, "last_seen": hour}})
    db.products.update_many({"id": {"$in": [str(i) for i in range(1, n, 500)]}}, {"$set": {"gone_at": hour}})
    for name in DELTA_FIELDS:
        db.products.create_index(name, name=name)


@contextlib.contextmanager
def private_store() -> Iterator[tuple[Path, str, Any, dict[str, str]]]:
    """A private secantusd-py: (a scratch directory, its URI, the bench's database, the command's environment)."""
    import pymongo

    from crawlhub.services import EmbeddedMongo

    with tempfile.TemporaryDirectory() as home:
        mongo = EmbeddedMongo(Path(home))
        uri = mongo.ensure()
        try:
            env = {**os.environ, "MONGO_URI": uri, "MONGO_DATABASE": "bench_export", "REDIS_URL": "redis://127.0.0.1:1/0"}
            yield Path(home), uri, pymongo.MongoClient(uri).bench_export, env
        finally:
            mongo.stop()


def measured(cmd: list[str], env: dict) -> tuple[float, float]:
    """(seconds, peak MB) of ``cmd``, its peak read by a launcher forked from a small process."""
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", LAUNCHER, *cmd], cwd=ROOT, env=env, capture_output=True, text=True)
    took = time.perf_counter() - started
    if done.returncode:
        raise SystemExit(f"{cmd} failed: {done.stderr[-2000:]}")
    return took, int(done.stdout.split()[-1]) / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=200_000)
    parser.add_argument("--quick", action="store_true", help="40,000 items")
    parser.add_argument("--delta", action="store_true", help="a day's delta (--since 1d) instead of everything")
    args = parser.parse_args()
    n = 40_000 if args.quick else args.items
    if args.delta:
        return delta(n)
    rows = []
    with private_store() as (home, uri, db, env):
        for size in (n // 4, n):
            fill(db, size)
            for fmt in ("jsonl", "json", "csv", "xml"):
                out = home / f"out.{fmt}"
                took, peak = measured([sys.executable, "-m", "crawlhub.cli", "export", "scrapeme", "-o", str(out),
                                       "--no-progress"], env)
                rows.append((f"crawlhub export {fmt}", size, took, peak))
            for name, script in (("pymongo cursor + json.dumps (floor)", FLOOR), ("list(find()) + json.dump (naive)", NAIVE)):
                took, peak = measured([sys.executable, "-c", script, uri, "bench_export", str(home / "peer")], env)
                rows.append((name, size, took, peak))
        baseline = measured([sys.executable, "-m", "crawlhub.cli", "--help"], env)[1]
    print(f"{'what':40} {'items':>8} {'seconds':>8} {'items/s':>9} {'peak MB':>8}")
    for name, size, took, peak in rows:
        print(f"{name:40} {size:>8,} {took:>8.1f} {size / took:>9,.0f} {peak:>8.1f}")
    print(f"the crawlhub command's own imports (crawlhub --help): {baseline:.1f} MB")
    for fmt in ("jsonl", "json", "csv", "xml"):
        small, big = (peak for name, size, _, peak in rows if name == f"crawlhub export {fmt}")
        print(f"{fmt}: peak {small:.1f} MB at {n // 4:,} items, {big:.1f} MB at {n:,} (x{big / small:.2f} for x4 the items)")


def delta(n: int) -> None:
    rows = []
    with private_store() as (home, uri, db, env):
        fill(db, n)
        age(db, n)
        out = home / "delta.jsonl"
        for gone in (False, True):
            extra = ["--include-gone"] if gone else []
            for _ in range(2):  # taking turns, twice
                took, _peak = measured([sys.executable, "-m", "crawlhub.cli", "export", "scrapeme", "-o", str(out),
                                        "--no-progress", "--since", "1d", *extra], env)
                got = len(out.read_text(encoding="utf-8").splitlines())
                rows.append((f"crawlhub export --since 1d {' '.join(extra)}", got, took))
                took, _peak = measured([sys.executable, "-c", OR_QUERY, uri, "bench_export", str(out),
                                        "gone" if gone else "live"], env)
                rows.append((f"one $or query, read ({'with' if gone else 'without'} gone)", int(out.read_text()), took))
    print(f"a day's delta of {n:,} items (1% changed, 0.2% found gone within the day)")
    print(f"{'what':52} {'items':>7} {'seconds':>8}")
    for name, got, took in rows:
        print(f"{name:52} {got:>7,} {took:>8.2f}")


if __name__ == "__main__":
    main()
