"""Cluster stats overhead: one crawlhub worker's pages/s with and without them.

The same crawl as bench/frontier.py (its generated site, spider and
settings, CONCURRENT_REQUESTS=32), run alternately with
CLUSTER_STATS_ENABLED on and off, twice each, on a private redis-server.
With stats on, every attempt is counted per spider and domain and written to
the audit log (one pipeline every CLUSTER_STATS_INTERVAL). Prints pages/s,
Redis commands per page and the Redis memory the stats keys use.

    .venv/bin/python -m bench.stats            # 10,000 pages per run
    .venv/bin/python -m bench.stats --quick    # 2,000
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.frontier import ROOT, SPIDER, memory_of, run_crawl


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=10000)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    import redis

    from crawlhub.services import EmbeddedRedis

    pages = 2000 if args.quick else args.pages
    redis_server = EmbeddedRedis(Path(tempfile.mkdtemp(prefix="bench-stats-")))
    redis_url = redis_server.ensure()
    site = subprocess.Popen([sys.executable, "-m", "bench.site", "--pages", str(pages)], cwd=ROOT,
                            stdout=subprocess.PIPE, text=True)
    try:
        base = f"http://127.0.0.1:{int(site.stdout.readline().split()[1])}"
        server = redis.Redis.from_url(redis_url)
        print(f"site: {pages} pages; one crawlhub worker, CONCURRENT_REQUESTS=32")
        results = {"on": [], "off": []}
        for run in ("on", "off", "on", "off"):
            server.flushall()
            server.config_resetstat()
            server.lpush(f"{SPIDER}:start_urls", f"{base}/p/0")
            os.environ["CLUSTER_STATS_ENABLED"] = "true" if run == "on" else "false"
            row = run_crawl("crawlhub", f"{base}/p/0", redis_url)
            row["commands_per_page"] = sum(v["calls"] for v in server.info("commandstats").values()) / row["pages"]
            row["stats_bytes"] = memory_of(server, f"{SPIDER}:stats:*") + memory_of(server, f"{SPIDER}:log")
            row["log_entries"] = server.xlen(f"{SPIDER}:log")
            results[run].append(row)
            print(f"stats {run:3}: {row['pages']} pages in {row['seconds']:.1f}s = {row['pages_per_s']:.1f} pages/s, "
                  f"{row['commands_per_page']:.2f} Redis commands/page, stats keys {row['stats_bytes'] / 1024:.0f} KiB "
                  f"({row['log_entries']} audit entries)", flush=True)
        on = sum(r["pages_per_s"] for r in results["on"]) / 2
        off = sum(r["pages_per_s"] for r in results["off"]) / 2
        print(f"\nmean pages/s: stats on {on:.1f}, off {off:.1f}: {on / off:.3f}x ({(1 - on / off) * 100:+.1f}% cost)")
        per_entry = results["on"][0]["stats_bytes"] / max(1, results["on"][0]["log_entries"])
        print(f"Redis memory of the stats keys: {per_entry:.0f} bytes per attempt (audit log included)")
    finally:
        os.environ.pop("CLUSTER_STATS_ENABLED", None)
        site.terminate()
        site.wait()
        redis_server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
