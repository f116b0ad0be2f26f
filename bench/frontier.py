"""Frontier benchmark: Scrapy's in-memory scheduler vs scrapy-redis vs crawlhub, in one run.

Serves a generated site on 127.0.0.1 (bench/site.py: page i links to its 5
children, a tree that reaches every page, and to 3 pages picked by a fixed
hash, anywhere in the site), starts a private redis-server, and crawls the
whole site with the same spider and settings (CONCURRENT_REQUESTS=32, no item
pipelines, robots.txt off, no politeness limit) under each scheduler, one
worker; and crawlhub with two workers on one frontier. The configurations
take turns (a round runs each once, the next round in reverse order) for
--repeat rounds, and the median of each is reported, with every run. A run's
time goes from its first response to its last, over all its workers (wall
clock). Prints pages/s, ratios, the workers' CPU per page (user + system,
start-up included, read by the driver with wait4) and the redis-server's
(INFO cpu), Redis round trips per page (counted in the client: one per
command or pipeline sent), Redis memory per seen URL and per queued request.
CPU per page spreads far less from run to run than pages/s on a shared
machine: compare costs with it.

    .venv/bin/python -m bench.frontier            # 20,000 pages, 3 rounds
    .venv/bin/python -m bench.frontier --quick    # 3,000 pages, 3 rounds
    .venv/bin/python -m bench.frontier --quality --pages 10000 --repeat 5   # the quality monitor's cost
    .venv/bin/python -m bench.frontier --sessions --pages 5000 --repeat 3   # sessions shared by the cluster
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SPIDER = "bench"
COMMON = {
    "CONCURRENT_REQUESTS": 32,
    "CONCURRENT_REQUESTS_PER_DOMAIN": 32,
    "ROBOTSTXT_OBEY": False,
    "LOG_LEVEL": "WARNING",
    "TELNETCONSOLE_ENABLED": False,
    # none: the frontier is measured, not MongoDB (crawlhub's add-on merges its pipelines into a
    # project's dict entry by entry, as Scrapy does with ITEM_PIPELINES_BASE: None turns each off)
    "ITEM_PIPELINES": {f"crawlhub.pipelines.{name}": None for name in (
        "clean.CleanPipeline", "validate.ValidatePipeline", "dedupe.DedupePipeline", "mongo.MongoPipeline")},
    "TWISTED_REACTOR": "twisted.internet.asyncioreactor.AsyncioSelectorReactor",
    "COOKIES_ENABLED": False,
    "EXTENSIONS": {"bench.frontier.Meter": 0, "scrapy.extensions.telnet.TelnetConsole": None},
}


# -- inside a crawl process ---------------------------------------------------------
def count_round_trips() -> None:
    """Count what the client sends Redis: one per command, one per pipeline.

    The count lives on redis-py's connection class: this module runs both as
    __main__ and as bench.frontier (the Meter extension), two module objects.
    """
    from redis.connection import AbstractConnection

    original = AbstractConnection.send_packed_command
    AbstractConnection.bench_round_trips = 0

    def counted(self, command, check_health=True):
        AbstractConnection.bench_round_trips += 1
        return original(self, command, check_health)

    AbstractConnection.send_packed_command = counted


def round_trips() -> int:
    from redis.connection import AbstractConnection

    return getattr(AbstractConnection, "bench_round_trips", 0)


class Meter:
    """Extension: pages, first and last response time, round trips, peak RSS -> BENCH_RESULT file."""

    def __init__(self, crawler):
        from scrapy import signals

        self.pages, self.first, self.last = 0, None, None
        crawler.signals.connect(self.response, signal=signals.response_received)
        crawler.signals.connect(self.closed, signal=signals.spider_closed)

    @classmethod
    def from_crawler(cls, crawler):
        return cls(crawler)

    def response(self, response, request, spider):
        now = time.time()  # wall clock: comparable across the workers of a run
        self.first = self.first or now
        self.last = now
        self.pages += 1

    def closed(self, spider, reason):
        result = {"pages": self.pages, "first": self.first or 0.0, "last": self.last or 0.0, "round_trips": round_trips(),
                  "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "reason": reason}
        Path(os.environ["BENCH_RESULT"]).write_text(json.dumps(result))


def _parse(spider, response):
    yield {"url": response.url}
    for href in response.css("a::attr(href)").getall():
        yield response.follow(href)


def crawl(mode: str, url: str, redis_url: str) -> None:
    import scrapy
    from scrapy.crawler import CrawlerProcess
    from scrapy.settings import Settings
    from scrapy.utils.project import get_project_settings

    count_round_trips()
    if mode == "crawlhub":
        from crawlhub.spider import CrawlhubSpider

        class Spider(CrawlhubSpider):
            name = SPIDER
            revisit = os.environ.get("BENCH_REVISIT") or None  # bench/revisit.py: the status store on

            def parse(self, response):
                if os.environ.get("BENCH_TYPED"):  # --quality: a typed item, whose fields the monitor counts
                    from crawlhub.items import Page

                    yield Page(url=response.url, title=response.css("title::text").get(), status=response.status,
                               source_url=response.url)
                else:
                    yield {"url": response.url}
                yield from self.follow_links(response, response.css("a::attr(href)").getall())

        settings = get_project_settings()
        settings.setdict({**COMMON, "REDIS_URL": redis_url, "DOMAIN_RATE": "0", "DOMAIN_CONCURRENCY": 0,
                          "MAX_IDLE_TIME_BEFORE_CLOSE": 1, "SPIDER_MODULES": [],
                          "EXTENSIONS": {**settings.getdict("EXTENSIONS"), **COMMON["EXTENSIONS"]}}, priority="cmdline")
        if os.environ.get("BENCH_MONGO_URI"):  # bench/revisit.py: items (and the status store) to MongoDB
            settings.setdict({"MONGO_URI": os.environ["BENCH_MONGO_URI"], "MONGO_DATABASE": "bench",
                              "ITEM_PIPELINES": {"crawlhub.pipelines.mongo.MongoPipeline": 800}}, priority="cmdline")
    else:
        class Spider(scrapy.Spider):
            name = SPIDER
            start_urls = [url]
            parse = _parse

        settings = Settings(COMMON)
        if mode == "scrapy-redis":
            settings.setdict({"SCHEDULER": "scrapy_redis.scheduler.Scheduler",
                              "DUPEFILTER_CLASS": "scrapy_redis.dupefilter.RFPDupeFilter", "REDIS_URL": redis_url,
                              "SCHEDULER_PERSIST": True})  # keep the dupefilter to measure it
    process = CrawlerProcess(settings)
    process.crawl(Spider)
    process.start()


# -- the driver -----------------------------------------------------------------------
def run_crawl(mode: str, url: str, redis_url: str, workers: int = 1, root: Path = ROOT,
              extra_env: dict | None = None) -> dict:
    results = []
    procs = []
    tmp = Path(tempfile.mkdtemp(prefix="bench-"))
    for n in range(workers):
        out = tmp / f"{mode}-{n}.json"
        env = dict(os.environ, **(extra_env or {}), BENCH_RESULT=str(out), PYTHONPATH=str(root))
        cmd = [sys.executable, "-m", "bench.frontier", "--crawl", mode, "--url", url, "--redis", redis_url]
        procs.append((subprocess.Popen(cmd, cwd=root, env=env), out))
    cpu = 0.0  # the workers' CPU (user + system, start-up included), read by the driver: the same for any tree
    for proc, out in procs:
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode != 0:
            raise SystemExit(f"{mode} crawl failed (exit {proc.returncode})")
        cpu += usage.ru_utime + usage.ru_stime
        results.append(json.loads(out.read_text()))
    pages = sum(r["pages"] for r in results)
    # from the first response of any worker to the last of any (not the longest single worker's span)
    seconds = max(r["last"] for r in results) - min(r["first"] for r in results if r["first"])
    return {"mode": mode, "workers": workers, "pages": pages, "seconds": seconds, "pages_per_s": pages / seconds,
            "round_trips_per_page": sum(r["round_trips"] for r in results) / pages,
            "rss_mb": max(r["rss_mb"] for r in results), "worker_cpu_ms_per_page": cpu * 1000 / pages}


def memory_of(server, pattern: str) -> int:
    return sum(server.memory_usage(k, samples=0) or 0 for k in server.scan_iter(pattern, count=1000))


def queued_request_bytes(server, base: str, count: int = 10000) -> dict:
    """Redis memory per queued request (plain GET, Scrapy's depth meta), each system's encoding."""
    import scrapy
    from scrapy.utils.test import get_crawler
    from scrapy_redis.queue import PriorityQueue

    from crawlhub._utils.urls import domain_of
    from crawlhub.frontier.serializer import RequestSerializer
    from tests.frontier_ops import Frontier, Keys
    from tests.helpers import project_settings

    class Spider(scrapy.Spider):
        name = "qbench"

        def parse(self, response):
            pass

    spider = Spider.from_crawler(get_crawler(Spider, settings_dict=project_settings()))
    requests = [scrapy.Request(f"{base}/p/{100000 + i}", callback=spider.parse, meta={"depth": 3}) for i in range(count)]
    out = {}
    server.flushdb()
    queue = PriorityQueue(server, spider, "sr:%(spider)s:requests")
    for r in requests:
        queue.push(r)
    out["scrapy-redis"] = memory_of(server, "sr:*") / count
    server.flushdb()
    from scrapy.settings import Settings

    frontier = Frontier(server, Keys.for_spider(Settings(project_settings()), "qbench"), "qbench")
    serializer = RequestSerializer(spider)
    for r in requests:
        frontier.enqueue(hashlib.sha1(r.url.encode()).hexdigest(), serializer.encode(r), 0, domain=domain_of(r.url))
    out["crawlhub"] = memory_of(server, "qbench:requests:*") / count
    out["crawlhub_payload"] = len(serializer.encode(requests[0]))
    server.flushdb()
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=20000)
    parser.add_argument("--quick", action="store_true", help="3,000 pages")
    parser.add_argument("--repeat", type=int, default=3, help="rounds; each configuration runs once per round")
    parser.add_argument("--against", type=Path, metavar="CHECKOUT",
                        help="A/B: crawlhub x1 and x2 of this tree and of CHECKOUT (say, a git worktree of an older "
                             "commit), taking turns on one site and Redis; prints the medians and the ratios")
    parser.add_argument("--quality", action="store_true",
                        help="A/B: crawlhub x1 with the quality monitor on and off (QUALITY_ENABLED), typed items, "
                             "taking turns; prints the medians and the ratios")
    parser.add_argument("--sessions", action="store_true",
                        help="A/B: crawlhub x1 and x2 with every request in a cluster-wide session (SESSIONS_ENABLED: "
                             "a script call per request, a pool of 4) and without, taking turns; the medians, the ratios")
    parser.add_argument("--crawl", help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    parser.add_argument("--redis", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.crawl:
        crawl(args.crawl, args.url, args.redis)
        return 0

    import redis

    from crawlhub.services import EmbeddedRedis

    pages = 3000 if args.quick else args.pages
    home = Path(tempfile.mkdtemp(prefix="bench-redis-"))
    redis_server = EmbeddedRedis(home)
    redis_url = redis_server.ensure()
    site = subprocess.Popen([sys.executable, "-m", "bench.site", "--pages", str(pages)], cwd=ROOT,
                            stdout=subprocess.PIPE, text=True)
    try:
        port = int(site.stdout.readline().split()[1])
        base = f"http://127.0.0.1:{port}"
        server = redis.Redis.from_url(redis_url)
        print(f"site: {pages} pages at {base}; Redis {redis_url}; CONCURRENT_REQUESTS=32; one worker unless said")
        if args.against:
            return compare(server, base, redis_url, {"this tree": (ROOT, {}), str(args.against): (
                args.against.resolve(), {})}, args.repeat)
        if args.quality:
            typed = {"BENCH_TYPED": "1", "CLUSTER_STATS_INTERVAL": "2"}
            return compare(server, base, redis_url, {"quality on": (ROOT, {**typed, "QUALITY_ENABLED": "1"}),
                                                     "quality off": (ROOT, {**typed, "QUALITY_ENABLED": "0"})},
                           args.repeat, worker_counts=(1,))
        if args.sessions:
            return compare(server, base, redis_url, {"sessions on": (ROOT, {"SESSIONS_ENABLED": "1"}),
                                                     "sessions off": (ROOT, {"SESSIONS_ENABLED": "0"})}, args.repeat)
        configs = [("memory", 1), ("scrapy-redis", 1), ("crawlhub", 1), ("crawlhub", 2)]
        runs: dict[tuple, list[dict]] = {c: [] for c in configs}
        for round_ in range(args.repeat):
            for mode, workers in (configs if round_ % 2 == 0 else configs[::-1]):  # take turns
                row = measure(server, mode, workers, base, redis_url)
                runs[(mode, workers)].append(row)
                label = f"{mode} x{workers}"
                extra = f", dupefilter {row['df_bytes_per_url']:.1f} B/URL" if "df_bytes_per_url" in row else ""
                if mode != "memory":
                    extra += (f"; server side: {row['scripts_per_page']:.2f} script calls and {row['commands_per_page']:.1f} "
                              "commands/page (INFO commandstats, scripts' inner commands included)")
                print(f"round {round_ + 1}  {label:16} {row['pages']:6} pages in {row['seconds']:6.1f}s = "
                      f"{row['pages_per_s']:7.1f} pages/s, {row['round_trips_per_page']:5.2f} Redis round trips/page, "
                      f"worker CPU {row['worker_cpu_ms_per_page']:.3f} ms/page, Redis CPU {row['redis_cpu_us_per_page']:.0f} "
                      f"us/page, peak RSS {row['rss_mb']:.0f} MB{extra}", flush=True)
        rows = [median_run(runs[c]) for c in configs]
        print()
        for (mode, workers), row in zip(configs, rows, strict=True):
            every = ", ".join(f"{r['pages_per_s']:.1f}" for r in runs[(mode, workers)])
            print(f"median {mode} x{workers}: {row['pages_per_s']:.1f} pages/s (runs: {every})")
        qb = queued_request_bytes(server, base)
        mem, sr, ch1, ch2 = rows
        print()
        print(f"crawlhub / in-memory      {ch1['pages_per_s'] / mem['pages_per_s']:.2f}x   (goal >= 0.9)")
        print(f"crawlhub / scrapy-redis   {ch1['pages_per_s'] / sr['pages_per_s']:.2f}x   (goal >= 1.4)")
        print(f"2 workers / 1 worker      {ch2['pages_per_s'] / ch1['pages_per_s']:.2f}x   (goal >= 1.7; 2 cores shared with the site and Redis)")
        print(f"round trips per page      {ch1['round_trips_per_page']:.2f}    (goal <= 3; scrapy-redis {sr['round_trips_per_page']:.2f})")
        print(f"dupefilter bytes per URL  {ch1['df_bytes_per_url']:.1f}    (scrapy-redis {sr['df_bytes_per_url']:.1f}; bench/dupefilter.py measures 1M URLs)")
        print(f"queued request bytes      {qb['crawlhub']:.0f}    (goal <= 150; payload {qb['crawlhub_payload']} B; scrapy-redis {qb['scrapy-redis']:.0f})")
        # Scrapy does not record a dont_filter start URL as seen, so the in-memory and
        # scrapy-redis runs fetch /p/0 a second time when a page links back to it
        counts = [r["pages"] for rs in runs.values() for r in rs]
        if any(not pages <= n <= pages + 1 for n in counts):
            print(f"WARNING: not every run crawled {pages} pages: {counts}")
    finally:
        site.terminate()
        site.wait()
        redis_server.stop()
    return 0


def compare(server, base: str, redis_url: str, sides: dict[str, tuple[Path, dict]], repeat: int,
            worker_counts: tuple[int, ...] = (1, 2)) -> int:
    """Two configurations side by side (label -> (tree, environment)): the same site and Redis, taking turns
    (a round runs each once, the next round in reverse order); prints every run, the medians and the ratios
    of the first to the second."""
    configs = [(label, workers) for workers in worker_counts for label in sides]
    figures = ("pages_per_s", "worker_cpu_ms_per_page", "redis_cpu_us_per_page", "round_trips_per_page")
    runs: dict[tuple, dict[str, list[float]]] = {c: {f: [] for f in figures} for c in configs}
    for round_ in range(repeat):
        for label, workers in (configs if round_ % 2 == 0 else configs[::-1]):
            root, env = sides[label]
            row = measure(server, "crawlhub", workers, base, redis_url, root, env)
            for f in figures:
                runs[(label, workers)][f].append(row[f])
            print(f"round {round_ + 1}  {label:24} x{workers}  "
                  f"{row['pages_per_s']:7.1f} pages/s, worker CPU {row['worker_cpu_ms_per_page']:.3f} ms/page, "
                  f"Redis CPU {row['redis_cpu_us_per_page']:.0f} us/page, {row['round_trips_per_page']:.2f} round trips/page",
                  flush=True)
    print()
    first, second = list(sides)
    for workers in worker_counts:
        for f in figures:
            mine, theirs = (sorted(runs[(label, workers)][f])[(repeat - 1) // 2] for label in (first, second))
            print(f"x{workers} {f:24} {first} {mine:9.3f}, {second} {theirs:9.3f}: {mine / theirs:.3f}x  "
                  f"(runs: {', '.join(f'{v:.3f}' for v in runs[(first, workers)][f])} | "
                  f"{', '.join(f'{v:.3f}' for v in runs[(second, workers)][f])})")
    return 0


def measure(server, mode: str, workers: int, base: str, redis_url: str, root: Path = ROOT,
            extra_env: dict | None = None) -> dict:
    """One crawl of the whole site in one configuration, on an empty Redis."""
    server.flushall()
    server.config_resetstat()
    redis_cpu = _cpu(server)
    if mode == "crawlhub":
        server.lpush(f"{SPIDER}:start_urls", f"{base}/p/0")
    row = run_crawl(mode, f"{base}/p/0", redis_url, workers, root, extra_env)
    row["redis_cpu_us_per_page"] = (_cpu(server) - redis_cpu) * 1e6 / row["pages"]
    stats = server.info("commandstats")
    row["scripts_per_page"] = sum(v["calls"] for k, v in stats.items() if k in ("cmdstat_evalsha", "cmdstat_eval")) / row["pages"]
    row["commands_per_page"] = sum(v["calls"] for v in stats.values()) / row["pages"]
    if mode == "scrapy-redis":
        row["df_bytes_per_url"] = memory_of(server, f"{SPIDER}:dupefilter") / max(1, server.scard(f"{SPIDER}:dupefilter"))
    elif mode == "crawlhub":
        row["df_bytes_per_url"] = memory_of(server, f"{SPIDER}:dupefilter*") / max(1, _seen(server))
    return row


def _cpu(server) -> float:
    """The redis-server's CPU seconds so far (its idle cost included)."""
    info = server.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def median_run(rows: list[dict]) -> dict:
    """The run with the median pages/s (the lower middle one for an even count)."""
    return sorted(rows, key=lambda r: r["pages_per_s"])[(len(rows) - 1) // 2]


def _seen(server) -> int:
    """URLs in crawlhub's duplicate filter, whatever its layout."""
    from crawlhub.frontier.dupefilter import seen_count

    return seen_count(server, f"{SPIDER}:dupefilter")


if __name__ == "__main__":
    sys.exit(main())
