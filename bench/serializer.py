"""Request encoding benchmark: microseconds to write one request as the JSON that crosses Redis.

Every request a spider yields is encoded once before it reaches the frontier (the duplicate filter
sees its fingerprint, Redis its payload). Measured, on the bundled scrapeme spider:

- crawlhub: ``RequestSerializer.encode`` (callback names looked up on the spider's class);
- Scrapy's lookup: ``Request.to_dict(spider=spider)`` + ``json.dumps``, the path crawlhub took
  before (and scrapy-redis's, which pickles the same dict): ``inspect.getmembers()`` on the
  spider for each request with a callback;
- no callback: both, for a request without one (the floor: no name to find).

No server is needed.

    .venv/bin/python -m bench.serializer            # 200,000 encodes per figure
    .venv/bin/python -m bench.serializer --quick    # 20,000
"""

from __future__ import annotations

import argparse
import json
import os
import time

from scrapy import Request


def per_call(fn, count: int, rounds: int = 3) -> float:
    """The best of ``rounds`` runs of ``count`` calls, in microseconds per call."""
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(count):
            fn()
        best = min(best, time.perf_counter() - start)
    return best / count * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="20,000 encodes per figure")
    args = parser.parse_args()
    count = 20_000 if args.quick else 200_000
    # the spider is built offline: no Redis is read (a REDIS_URL nobody answers on proves it)
    os.environ.setdefault("REDIS_URL", "redis://127.0.0.1:1/0")
    from crawlhub.frontier.serializer import RequestSerializer
    from spiders.scrapeme import ScrapemeSpider
    from tests.helpers import make_spider

    spider = make_spider(ScrapemeSpider)
    codec = RequestSerializer(spider)
    meta = {"crawlhub_seed_host": "scrapeme.live", "depth": 3}
    with_callback = Request("https://scrapeme.live/shop/page/12/", callback=spider.parse, meta=meta)
    plain = Request("https://scrapeme.live/shop/page/12/", meta=meta)

    def scrapy_way(request):
        return json.dumps(request.to_dict(spider=spider), default=repr, separators=(",", ":")).encode()

    rows = [
        ("callback=spider.parse", per_call(lambda: codec.encode(with_callback), count),
         per_call(lambda: scrapy_way(with_callback), count)),
        ("no callback", per_call(lambda: codec.encode(plain), count), per_call(lambda: scrapy_way(plain), count)),
    ]
    print(f"{count:,} encodes per figure, best of 3 rounds; microseconds per request")
    print(f"{'request':<32}{'crawlhub':>10}{'to_dict(spider)':>17}{'ratio':>8}")
    for name, ours, theirs in rows:
        print(f"{name:<32}{ours:>10.1f}{theirs:>17.1f}{theirs / ours:>7.1f}x")


if __name__ == "__main__":
    main()
