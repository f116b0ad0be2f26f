"""Duplicate-filter benchmark: Redis memory per URL at 1,000,000 URLs, per filter.

Inserts the same fingerprints (Scrapy's 20-byte SHA-1) into a private
redis-server through each filter and prints bytes per URL (MEMORY USAGE of
the filter's keys), insert rate, and the false positives among 100,000 URLs
never inserted:

- scrapy-redis: a set of 40-character hex fingerprints (the peer);
- crawlhub exact: 64-bit integers in DUPEFILTER_BUCKETS integer sets;
- crawlhub bloom: a Bloom filter on a Redis bitmap (capacity = the URL count,
  0.1% error), as used when the server has no RedisBloom module.

crawlhub's filters run through the same Lua helper the frontier uses.

    .venv/bin/python -m bench.dupefilter            # 1,000,000 URLs
    .venv/bin/python -m bench.dupefilter --quick    # 100,000 URLs
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import tempfile
import time
from pathlib import Path

from crawlhub.frontier.dupefilter import BloomFilter, ExactFilter
from crawlhub.frontier.scripts import source

ADD = source("_now") + "\n" + source("_helpers") + """
local new = 0
for i = 1, #ARGV do if first_seen(cjson.decode(ARGV[i])) then new = new + 1 end end
return new
"""
# the probe asks without adding (a "seen" answer for a new URL is a false positive)
SEEN = """
local n = 0
for i = 1, #ARGV do
  local spec = cjson.decode(ARGV[i])
  local seen = true
  if spec[1] == 's' then
    seen = redis.call('SISMEMBER', spec[2], spec[3]) == 1
  else
    for j = 4, #spec do if redis.call('GETBIT', spec[2], spec[j]) == 0 then seen = false; break end end
  end
  if seen then n = n + 1 end
end
return n
"""
BATCH = 2000


def fingerprints(start: int, count: int):
    for i in range(start, start + count):
        yield hashlib.sha1(f"http://example.com/p/{i}".encode()).digest()


def memory(server, pattern: str) -> int:
    return sum(server.memory_usage(k, samples=0) or 0 for k in server.scan_iter(pattern, count=1000))


def run_filter(server, name, make_spec, count: int, probe: int) -> dict:
    server.flushall()
    add = server.register_script(ADD)
    started = time.monotonic()
    batch, new = [], 0
    for fp in fingerprints(0, count):
        batch.append(json.dumps(make_spec(fp)))
        if len(batch) == BATCH:
            new += add(args=batch)
            batch = []
    if batch:
        new += add(args=batch)
    seconds = time.monotonic() - started
    size = memory(server, "df*")
    check = server.register_script(SEEN)
    false_pos = 0
    probes = list(fingerprints(count, probe))
    for i in range(0, len(probes), BATCH):
        false_pos += check(args=[json.dumps(make_spec(fp)) for fp in probes[i:i + BATCH]])
    return {"filter": name, "urls": count, "new": new, "bytes_per_url": size / count,
            "inserts_per_s": count / seconds, "false_positives": false_pos / probe}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--urls", type=int, default=1_000_000)
    parser.add_argument("--quick", action="store_true", help="100,000 URLs")
    parser.add_argument("--buckets", type=int, default=4096)
    args = parser.parse_args(argv)
    count = 100_000 if args.quick else args.urls
    probe = min(100_000, count)

    import redis

    from crawlhub.services import EmbeddedRedis

    redis_server = EmbeddedRedis(Path(tempfile.mkdtemp(prefix="bench-df-")))
    server = redis.Redis.from_url(redis_server.ensure())
    try:
        exact = ExactFilter("df", args.buckets)
        bloom = BloomFilter("df", count, 0.001)
        print(f"{count} URLs; Redis {server.info('server')['redis_version']}, "
              f"set-max-intset-entries {server.config_get('set-max-intset-entries')['set-max-intset-entries']}; "
              f"bloom: {bloom.bits} bits, {bloom.hashes} hashes")
        rows = [
            run_filter(server, "scrapy-redis (hex set)", lambda fp: ["s", "df", fp.hex()], count, probe),
            run_filter(server, f"crawlhub exact ({args.buckets} buckets)", exact.spec, count, probe),
            run_filter(server, "crawlhub bloom (bitmap, 0.1%)", bloom.spec, count, probe),
        ]
        for r in rows:
            print(f"{r['filter']:34} {r['bytes_per_url']:6.2f} bytes/URL  {r['inserts_per_s']:9.0f} inserts/s  "
                  f"false positives {r['false_positives'] * 100:.3f}%  (new: {r['new']})")
        peer, ex, bl = rows
        print()
        print(f"exact: {ex['bytes_per_url']:.2f} B/URL (goal <= 10), {peer['bytes_per_url'] / ex['bytes_per_url']:.1f}x smaller than scrapy-redis")
        print(f"bloom: {bl['bytes_per_url']:.2f} B/URL (goal <= 2) at {bl['false_positives'] * 100:.3f}% false positives (goal 0.1%)")
    finally:
        redis_server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
