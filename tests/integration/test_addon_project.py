"""Integration: a newcomer's project, made by `scrapy startproject` with crawlhub's add-on line (#67).

`scrapy genspider -t crawlhub` makes crawlhub's spider there (no TEMPLATES_DIR to set). A worker says, in one
warning, that startproject's DOWNLOAD_DELAY = 1 and CONCURRENT_REQUESTS_PER_DOMAIN = 1 slow it down on top of the
cluster's politeness; it counts a download's latency from when the download starts, not from when the request
joined the worker's queue behind that delay; and its last start-up line gives the commands that reach its Redis,
on whatever port it listens: they seed the crawl as they are.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import crawlhub
from tests.harness import SCRAPY, start_worker, wait_all, wait_for

PAGES = {f"/p/{i}": f"<html><head><title>page {i}</title></head><body>{i}</body></html>" for i in range(6)}


def new_project(tmp_path: Path, env: dict) -> Path:
    """`scrapy startproject shopproj`, its settings as Scrapy writes them plus the add-on's line."""
    made = subprocess.run([*SCRAPY, "startproject", "shopproj"], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert made.returncode == 0, made.stderr
    project = tmp_path / "shopproj"
    settings = project / "shopproj" / "settings.py"
    written = settings.read_text()
    assert "\nDOWNLOAD_DELAY = 1\n" in written and "\nCONCURRENT_REQUESTS_PER_DOMAIN = 1\n" in written, written
    settings.write_text(written + '\nADDONS = {"crawlhub.Addon": 0}\n')
    return project


def crawlhub_command(project: Path, env: dict, *args: str) -> subprocess.CompletedProcess:
    """The `crawlhub` command, run in the project's directory."""
    return subprocess.run([sys.executable, "-m", "crawlhub.cli", *args], cwd=project, env=env, capture_output=True,
                          text=True, timeout=60)


def genspider(project: Path, env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*SCRAPY, "genspider", *args], cwd=project, env=env, capture_output=True, text=True)


def test_genspider_makes_crawlhubs_spider_in_a_startproject_project(env, tmp_path):
    project = new_project(tmp_path, env)

    made = genspider(project, env, "-t", "crawlhub", "shop", "example.com")
    assert made.returncode == 0, made.stdout + made.stderr
    spider = (project / "shopproj" / "spiders" / "shop.py").read_text()
    template = (Path(crawlhub.TEMPLATES_DIR) / "spiders" / "crawlhub.tmpl").read_text()
    assert spider.splitlines()[1:4] == template.splitlines()[1:4], "made from crawlhub's template"
    assert "class ShopSpider(CrawlhubSpider)" in spider and 'name = "shop"' in spider
    assert "crawlhub seed shop https://example.com/" in spider
    listed = genspider(project, env, "-l")
    assert listed.returncode == 0 and {"basic", "crawl", "crawlhub"} <= set(listed.stdout.split()), listed.stdout
    unknown = genspider(project, env, "-t", "nosuch", "x", "x.com")
    assert unknown.returncode == 2 and "Unable to find template: nosuch" in unknown.stdout, unknown.stdout


def test_a_worker_warns_of_scrapys_throttles_and_ends_its_start_up_with_how_to_seed(env, site, redis_client,
                                                                                      redis_server, mongo_db, tmp_path):
    project = new_project(tmp_path, env)
    assert genspider(project, env, "-t", "crawlhub", "shop", "127.0.0.1").returncode == 0
    shop = site(PAGES)
    port = redis_server.port
    assert port != 6379, "the point: a Redis that plain `redis-cli lpush` does not reach"

    worker = start_worker("shop", env, tmp_path / "logs", "w", cwd=project, MAX_IDLE_TIME_BEFORE_CLOSE=10)
    assert wait_for(lambda: "Waiting for seeds" in worker.log(), 60), worker.log()[-3000:]
    lines = worker.log().rstrip("\n").splitlines()
    last = lines[-1]
    assert "[shop] INFO: Waiting for seeds in 'shop:start_urls'; seed the crawl with: crawlhub seed shop URL " \
           f"(or: redis-cli -p {port} lpush shop:start_urls URL)" in last, lines[-6:]
    assert any("Spider opened" in line for line in lines[:-1]) and any("Shared frontier on" in line for line in lines)

    # one warning names startproject's two settings, what they do to the cluster's pace, and what to do instead
    warnings = [line for line in lines if "WARNING" in line and "DOWNLOAD_DELAY" in line]
    assert len(warnings) == 1, warnings
    for said in ("DOWNLOAD_DELAY = 1 (from settings.py", "CONCURRENT_REQUESTS_PER_DOMAIN = 1 (from settings.py",
                 "per worker and domain", "DOMAIN_RATE 0", "Remove them", "DOMAIN_LIMITS"):
        assert said in warnings[0], (said, warnings[0])
    assert "AUTOTHROTTLE" not in warnings[0], "startproject leaves it commented out: not named"

    # the commands of the last line, as they are (URL replaced): one from the project's directory, one redis-cli
    crawlhub_seed = last.split("seed the crawl with: ", 1)[1].split(" (or: ", 1)[0].split()
    assert crawlhub_seed[:3] == ["crawlhub", "seed", "shop"]
    urls = [f"{shop.url}{path}" for path in PAGES]
    seeded = crawlhub_command(project, env, *crawlhub_seed[1:-1], *urls[:-1])
    assert seeded.returncode == 0, seeded.stderr
    redis_cli = last.split(" (or: ", 1)[1].rstrip(")").split()
    if shutil.which("redis-cli"):
        assert subprocess.run([*redis_cli[:-1], urls[-1]], capture_output=True).returncode == 0
    else:
        redis_client.lpush(redis_cli[-2], urls[-1])
    wait_all([worker], 120)
    assert sorted(shop.fetched("/p/")) == sorted(PAGES), "both commands reached the worker's Redis"

    # each page waited about 1 s behind the one before it in the worker (DOWNLOAD_DELAY): not a download's latency
    shown = crawlhub_command(project, env, "log", "shop", "--json")
    assert shown.returncode == 0, shown.stderr
    attempts = [json.loads(line) for line in shown.stdout.splitlines()]
    pages = [a for a in attempts if "/p/" in a["url"]]
    assert len(pages) == len(PAGES) and max(a["ms"] for a in pages) < 900, [a["ms"] for a in pages]
