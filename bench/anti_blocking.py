"""Anti-blocking benchmark: what header profiles and proxy choice cost per request.

Runs each middleware's per-request path in-process against a private
redis-server and prints microseconds per request and Redis commands per
request, next to the baseline that does the same job in plain Scrapy
(DefaultHeadersMiddleware + UserAgentMiddleware, a static header set):

- profiles rotate / sticky: HeaderProfileMiddleware (sticky: after the
  cluster-wide choice is cached);
- proxy choice: ProxyMiddleware, 3 pools x 20 proxies, 200 domains, a few
  proxies cooling, state refreshed from Redis every PROXY_STATE_REFRESH;
- success path: ProxyBanMiddleware on a 200 answer (batched success counts).

    .venv/bin/python -m bench.anti_blocking            # 200,000 requests each
    .venv/bin/python -m bench.anti_blocking --quick    # 20,000
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import redis
from scrapy import Request, Spider
from scrapy.downloadermiddlewares.defaultheaders import DefaultHeadersMiddleware
from scrapy.downloadermiddlewares.useragent import UserAgentMiddleware
from scrapy.http import HtmlResponse
from scrapy.utils.test import get_crawler

from crawlhub import proxies as px
from crawlhub.downloadermiddlewares.headers import HeaderProfileMiddleware
from crawlhub.downloadermiddlewares.proxy import ProxyBanMiddleware, ProxyMiddleware
from crawlhub.services import EmbeddedRedis
from tests.helpers import project_settings


def commands(server) -> int:
    return sum(v["calls"] for k, v in server.info("commandstats").items())


def timed(label: str, n: int, step, server=None) -> dict:
    before = commands(server) if server is not None else 0
    started = time.perf_counter()
    for i in range(n):
        step(i)
    seconds = time.perf_counter() - started
    calls = (commands(server) - before - 1) if server is not None else 0
    row = {"what": label, "us_per_request": seconds / n * 1e6, "redis_commands_per_request": calls / n}
    print(f"{label:44} {row['us_per_request']:8.1f} us/request   {row['redis_commands_per_request']:.4f} Redis commands/request")
    return row


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    n = 20_000 if args.quick else 200_000
    redis_server = EmbeddedRedis(Path(tempfile.mkdtemp(prefix="bench-ab-")))
    server = redis.Redis.from_url(redis_server.ensure())
    try:
        urls = [f"https://site{i % 200}.example/page/{i}" for i in range(1000)]

        def crawler_for(**settings):
            crawler = get_crawler(Spider, settings_dict=project_settings(**settings))
            crawler.spider = Spider("bench")
            return crawler

        base = crawler_for()
        defaults, ua = DefaultHeadersMiddleware.from_crawler(base), UserAgentMiddleware.from_crawler(base)
        ua.spider_opened(base.spider)

        def baseline(i):
            r = Request(urls[i % 1000])
            defaults.process_request(r)
            ua.process_request(r)

        print(f"{n:,} requests each, 200 domains\n")
        rows = [timed("Scrapy default headers + user agent", n, baseline)]
        for policy in ("rotate", "sticky"):
            mw = HeaderProfileMiddleware.from_crawler(crawler_for(HEADER_PROFILES_POLICY=policy))

            def profile(i, mw=mw):
                mw.process_request(Request(urls[i % 1000], headers={"Referer": "https://site1.example/"}))

            rows.append(timed(f"header profiles, {policy}", n, profile))

        pools = {tier: [f"http://user:pw@10.{t}.0.{i}:8080" for i in range(20)]
                 for t, tier in enumerate(("datacenter", "residential", "mobile"))}

        class Picker(ProxyMiddleware):
            server = property(lambda self: server)

        picker = Picker(crawler_for(PROXY_POOLS=pools), px.parse_pools(pools))
        now = time.time()
        for d in range(0, 200, 10):  # some proxies cooling on some domains
            server.hset(px.cool_key(f"site{d}.example"), mapping={picker.pools["datacenter"][j].id: now + 3600 for j in range(5)})

        def choose(i):
            picker.process_request(Request(urls[i % 1000]))

        rows.append(timed("proxy choice (round robin, 60 proxies)", n, choose, server))

        ban = ProxyBanMiddleware(picker.crawler)
        ban._picker = picker
        request = Request(urls[0])
        picker.process_request(request)
        response = HtmlResponse(urls[0], body=b"<html><body>ok</body></html>", request=request)

        def success(i):
            ban.process_response(request, response)

        rows.append(timed("proxied 200 answer (ban check + success)", n, success, server))
        print("\nmarkdown:\n| path | us/request | Redis commands/request |\n| --- | --- | --- |")
        for row in rows:
            print(f"| {row['what']} | {row['us_per_request']:.1f} | {row['redis_commands_per_request']:.4f} |")
    finally:
        redis_server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
