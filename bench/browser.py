"""The ladder's three rungs: the same 500 pages plain, impersonated (curl_cffi) and through headless Chromium,
one worker.

Serves bench/site.py's generated site (500 pages) on 127.0.0.1 and crawls it
three times with the same spider and settings (Scrapy's in-memory scheduler, so the
figures are each rung's cost alone): plain HTTP (Scrapy's own client), every request on the
impersonate rung (crawlhub's ImpersonateDownloadHandler: curl_cffi as Chrome), then every request
rendered by crawlhub's BrowserDownloadHandler (Debian's Chromium). Prints
pages/s and peak memory (PSS) of the worker's whole process tree (Python, Playwright's
driver, Chromium), and the tree's memory after 50 and after 500 pages: a flat
figure means pages and contexts are closed.

    .venv/bin/python -m bench.browser [--pages 500] [--https]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from bench import frontier

ROOT = Path(__file__).resolve().parent.parent


def tree_rss_mb(pid: int) -> float:
    """Memory of a process and all its descendants, from /proc: PSS (shared pages
    split between the processes sharing them; plain RSS would count Chromium's
    shared libraries once per process), RSS where PSS is not available."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
                ppid = int(stat.rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        todo.extend(children.get(p, []))
        try:
            lines = Path(f"/proc/{p}/smaps_rollup").read_text().splitlines()
            field = "Pss:"
        except OSError:
            try:
                lines, field = Path(f"/proc/{p}/status").read_text().splitlines(), "VmRSS:"
            except OSError:
                continue
        total += sum(int(line.split()[1]) for line in lines if line.startswith(field))
    return total / 1024


class Meter(frontier.Meter):
    """Extension: pages/s (first to last response) and the process tree's memory every 25 pages."""

    def __init__(self, crawler):
        super().__init__(crawler)
        self.rss: dict[int, float] = {}

    def response(self, response, request, spider):
        super().response(response, request, spider)
        if self.pages % 25 == 0 or self.pages == 50:
            self.rss[self.pages] = tree_rss_mb(os.getpid())

    def closed(self, spider, reason):
        Path(os.environ["BENCH_RESULT"]).write_text(json.dumps({
            "pages": self.pages, "seconds": (self.last or 0) - (self.first or 0), "rss": self.rss}))


def crawl(mode: str, url: str) -> None:
    import scrapy
    from scrapy.crawler import CrawlerProcess
    from scrapy.settings import Settings
    from scrapy.utils.project import get_project_settings

    from crawlhub import meta
    from crawlhub.browser import browser_settings
    from crawlhub.impersonate import HANDLER as IMPERSONATE

    browser = mode == "browser"
    rung = {meta.DOWNLOAD_RUNG: "impersonate"} if mode == "impersonate" else {}

    class Spider(scrapy.Spider):
        name = "bench_browser"
        start_urls = [url]

        async def start(self):
            yield scrapy.Request(url, meta={"playwright": browser, **rung})

        def parse(self, response):
            yield {"url": response.url}
            for href in response.css("a::attr(href)").getall():
                yield response.follow(href, meta={"playwright": browser, **rung})

    project = get_project_settings()
    settings = Settings({
        "CONCURRENT_REQUESTS": 8, "ROBOTSTXT_OBEY": False, "LOG_LEVEL": "WARNING", "TELNETCONSOLE_ENABLED": False,
        "TWISTED_REACTOR": "twisted.internet.asyncioreactor.AsyncioSelectorReactor",
        "EXTENSIONS": {"bench.browser.Meter": 0},
        **{k: project.get(k) for k in ("BROWSER_MAX_CONTEXTS", "BROWSER_MAX_PAGES_PER_CONTEXT", "BROWSER_TIMEOUT",
                                        "BROWSER_ABORT_RESOURCES", "CHROMIUM_PATH")},
    })
    if browser:  # plain: Scrapy's own handler, no Playwright at all
        settings.setdict(browser_settings(settings))
    elif rung:  # Scrapy's handler with the impersonate rung in front (the request's meta sends it there)
        settings.set("DOWNLOAD_HANDLERS", {"http": IMPERSONATE, "https": IMPERSONATE})
    process = CrawlerProcess(settings)
    process.crawl(Spider)
    process.start()


def run(mode: str, url: str) -> dict:
    out = Path(tempfile.mkdtemp(prefix="bench-browser-")) / f"{mode}.json"
    env = dict(os.environ, BENCH_RESULT=str(out), PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, "-m", "bench.browser", "--crawl", mode, "--url", url], cwd=ROOT, env=env)
    if proc.returncode != 0:
        raise SystemExit(f"{mode} crawl failed")
    result = json.loads(out.read_text())
    result["rss"] = {int(k): v for k, v in result["rss"].items()}
    return result


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=500)
    parser.add_argument("--https", action="store_true", help="the site over HTTPS: each rung's TLS handshake counted")
    parser.add_argument("--crawl", help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.crawl:
        crawl(args.crawl, args.url)
        return 0
    site = subprocess.Popen([sys.executable, "-m", "bench.site", "--pages", str(args.pages), *(["--tls"] if args.https else [])],
                            cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        port = int(site.stdout.readline().split()[1])
        url = f"{'https' if args.https else 'http'}://127.0.0.1:{port}/p/0"
        print(f"site: {args.pages} pages at {url}; one worker, CONCURRENT_REQUESTS=8, Scrapy's in-memory scheduler")
        rows = {}
        for mode in ("plain", "impersonate", "browser"):
            r = rows[mode] = run(mode, url)
            rss = r["rss"]
            print(f"{mode:11} {r['pages']:5} pages in {r['seconds']:6.1f}s = {r['pages'] / r['seconds']:7.1f} pages/s; "
                  f"process tree memory (PSS): peak {max(rss.values()):.0f} MB, after 50 pages {rss.get(50, 0):.0f} MB, "
                  f"after {max(rss)} pages {rss[max(rss)]:.0f} MB", flush=True)
        plain, impersonate, browser = rows["plain"], rows["impersonate"], rows["browser"]
        print()
        print(f"impersonate costs {(plain['pages'] / plain['seconds']) / (impersonate['pages'] / impersonate['seconds']):.1f}x "
              f"the time and {max(impersonate['rss'].values()) / max(plain['rss'].values()):.1f}x the memory of plain requests")
        print(f"browser costs {(plain['pages'] / plain['seconds']) / (browser['pages'] / browser['seconds']):.1f}x the time "
              f"and {max(browser['rss'].values()) / max(plain['rss'].values()):.1f}x the memory of plain requests")
        late = browser["rss"][max(browser["rss"])]
        print(f"browser memory after {max(browser['rss'])} pages vs after 50: {late / browser['rss'][50]:.2f}x")
    finally:
        site.terminate()
        site.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
