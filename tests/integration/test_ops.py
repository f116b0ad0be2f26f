"""Integration: the `crawlhub` command against live workers.

Real `scrapy crawl` workers on the tests' Redis and MongoDB; the local shop's
access log is the judge of what was fetched and when.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections import Counter

import pytest
from scrapy.settings import Settings

from crawlhub._utils.urls import domain_of
from crawlhub.monitor.status import cluster_status
from tests.harness import ROOT, cli, queued, seen, start_worker, wait_all, wait_for
from tests.helpers import project_settings
from tests.sites.server import refused_port
from tests.sites.shop import shop_pages


def status_json(env, spider="scrapeme") -> dict:
    out = cli(env, "status", spider, "--json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_status_pause_dead_worker_and_resume(env, site, redis_client, mongo_db, tmp_path):
    pages = shop_pages(80 * 4, 4)  # 80 listing pages: the pause (a command that takes seconds to start on a
    # loaded machine) must come before the end
    shop = site(pages)
    env = {**env, "DOMAIN_RATE": "6/s", "WORKER_HEARTBEAT_INTERVAL": "1", "LEASE_TTL": "5", "CLUSTER_STATS_INTERVAL": "0.5"}
    redis_client.lpush("scrapeme:start_urls", f"{shop.url}/shop/")
    workers = [start_worker("scrapeme", env, tmp_path, f"w{i}") for i in range(2)]
    assert wait_for(lambda: len(shop.fetched("/shop")) >= 10, 60), "the crawl started"

    # pause: no new request reaches the site FRONTIER_POLL_INTERVAL (0.5 s, docs/cli.md) after it
    assert cli(env, "pause", "scrapeme").returncode == 0
    paused_at = time.time()
    # watched for 4 s; a request arriving later than 0.5 s after the pause ends the watch at once
    wait_for(lambda: any(h.arrived > paused_at + 0.5 for h in shop.hits), 4)
    late = [h.path for h in shop.hits if h.arrived > paused_at + 0.5]
    assert late == [], f"requests after the pause: {late}"
    fetched_while_paused = len(shop.fetched("/shop"))
    assert fetched_while_paused < len(pages), "the pause came before the end"

    # status agrees with Redis and MongoDB (stable while paused)
    data = wait_for(lambda: (d := status_json(env))["inflight"] == 0 and d, 10)
    assert data["paused"] is True
    assert data["queued"] == queued(redis_client, "scrapeme") > 0
    assert data["inflight"] == redis_client.zcard("scrapeme:inflight") == 0
    assert data["seen"] == seen(redis_client, "scrapeme")
    products = mongo_db.products.count_documents({})
    assert data["items"]["stored"]["products"] == products == fetched_while_paused * 4
    assert data["totals"]["items"] == products and data["items"]["valid_share"] == 1.0
    assert data["workers_alive"] == 2 and data["workers_dead"] == 0
    assert data["totals"]["2xx"] >= fetched_while_paused and data["pages_per_min_5m"] > 0
    domain = data["domains"][0]
    assert domain["requests"] == data["totals"]["requests"] and domain["p50_ms"] and domain["p95_ms"] >= domain["p50_ms"]
    assert domain["4xx"] == 1, "robots.txt: the shop has none"
    assert domain["success_rate"] == round((domain["2xx"] + domain["3xx"]) / domain["requests"], 4)
    assert data["eta_seconds"] is not None

    # a killed worker shows as dead within its heartbeat timeout (3 heartbeats of 1 s)
    workers[0].proc.send_signal(signal.SIGKILL)
    killed_at = time.monotonic()
    # what `crawlhub status` computes, polled in this process: a `crawlhub status` process takes 1-3 s to start
    # on a loaded machine (the suite runs in parallel), which is the command's start-up, not the detection
    settings = Settings(project_settings(WORKER_HEARTBEAT_INTERVAL=1))
    dead = wait_for(lambda: cluster_status(redis_client, settings, "scrapeme", with_items=False)["workers_dead"] == 1,
                    10, step=0.1)
    # 3 s of silence (3 heartbeats of 1 s), and the bound the test always had
    assert dead and time.monotonic() - killed_at < 8, "dead within the heartbeat timeout"
    assert status_json(env)["workers_dead"] == 1, "and the command shows it"
    text = cli(env, "status", "scrapeme").stdout
    assert "[PAUSED]" in text and "1 alive, 1 dead" in text

    assert cli(env, "resume", "scrapeme").returncode == 0
    wait_all(workers[1:], 120)
    assert set(shop.fetched("/shop")) == set(pages), "the crawl completes after resume"
    assert mongo_db.products.count_documents({}) == len(pages) * 4


def interrupted_after(args: list[str], env: dict, marker: str, times: int) -> subprocess.CompletedProcess:
    """`crawlhub ARGS`, sent SIGINT (as Ctrl-C) once its output holds ``marker`` ``times`` times (or after 60 s)."""
    import threading

    proc = subprocess.Popen([sys.executable, "-m", "crawlhub.cli", *args], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    out: list[str] = []
    reader = threading.Thread(target=lambda: out.extend(iter(proc.stdout.readline, "")), daemon=True)
    reader.start()
    wait_for(lambda: "".join(out).count(marker) >= times or proc.poll() is not None, 60)
    proc.send_signal(signal.SIGINT)
    stderr = proc.stderr.read()  # (until it exits; stdout is the reader's alone)
    code = proc.wait(30)
    reader.join(10)
    return subprocess.CompletedProcess(proc.args, code, "".join(out), stderr)


def test_command_errors_and_confirmation(env, redis_client):
    redis_client.lpush("scrapeme:start_urls", "https://example.com/")
    answer = cli(env, "reset", "scrapeme", input="n\n")
    assert answer.returncode == 1 and "nothing deleted" in answer.stdout
    assert redis_client.llen("scrapeme:start_urls") == 1, "'n' deletes nothing"
    assert cli(env, "reset", "scrapeme", input="y\n").returncode == 0 and redis_client.llen("scrapeme:start_urls") == 0

    bad = cli(env, "seed", "scrapeme", "https://example.com/ok", "not a url")
    assert bad.returncode == 2 and "refused 'not a url'" in bad.stderr and "nothing pushed" in bad.stderr
    assert redis_client.llen("scrapeme:start_urls") == 0, "a bad seed in the batch: nothing is pushed"
    ok = cli(env, "seed", "scrapeme", "https://example.com/a", "--priority", "5")
    assert ok.returncode == 0
    assert json.loads(redis_client.lpop("scrapeme:start_urls")) == {"url": "https://example.com/a", "priority": 5}

    # --watch redraws until Ctrl-C (SIGINT), then exits cleanly (interrupted once it drew 3 frames: the command
    # takes 1-5 s to start on a loaded machine)
    watch = interrupted_after(["status", "scrapeme", "--watch", "--interval", "0.5"], env, "every 0.5s", 3)
    assert watch.returncode == 0 and "spider scrapeme" in watch.stdout and "every 0.5s" in watch.stdout, watch.stderr
    assert watch.stdout.count("every 0.5s") >= 3, "piped, --watch prints one frame after another"

    unknown = cli(env, "status", "nosuchspider")
    assert unknown.returncode == 2 and "unknown spider 'nosuchspider'" in unknown.stderr and "scrapeme" in unknown.stderr
    down = cli({**env, "REDIS_URL": f"redis://127.0.0.1:{refused_port()}/0"}, "status", "scrapeme")
    assert down.returncode == 3 and "cannot reach Redis" in down.stderr


def test_audit_log_has_one_entry_per_attempt_and_metrics_are_served(env, site, redis_client, tmp_path):
    pages = shop_pages(12 * 4, 4)
    pages["/shop/page/5/"] = (500, "text/html", "<h1>oops</h1>", {})
    pages["/shop/page/7/"] = (404, "text/html", "<h1>gone</h1>", {})
    shop = site(pages, delay=0.1)
    port = refused_port()
    env = {**env, "METRICS_PORT": str(port), "METRICS_ADDRESS": "127.0.0.1", "RETRY_BACKOFF_BASE": "0.2",
           "CLUSTER_STATS_INTERVAL": "0.5"}
    redis_client.lpush("scrapeme:start_urls", f"{shop.url}/shop/")
    worker = start_worker("scrapeme", env, tmp_path, "w")

    def scrape():
        try:
            return urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=1).read().decode()
        except OSError:
            return ""

    metrics = wait_for(lambda: (m := scrape()) and "crawlhub_requests_total{" in m and m, 30)
    assert metrics and 'crawlhub_worker_up{spider="scrapeme"' in metrics
    wait_all([worker], 120)

    logged = [json.loads(line) for line in cli(env, "log", "scrapeme", "-n", "1000", "--json").stdout.splitlines()]
    from_site = Counter((h.path, h.status) for h in shop.hits)
    from_log = Counter((e["url"].split(str(shop.port), 1)[1], e["status"]) for e in logged)
    assert from_log == from_site, (from_log - from_site, from_site - from_log)
    assert from_site[("/shop/page/5/", 500)] == 3, "each retry is an attempt of its own"
    assert all(e["worker"] and e["ms"] > 0 and e["proxy"] == "" and e["browser"] is False for e in logged)
    errors = cli(env, "log", "scrapeme", "--status", "5xx", "--json").stdout.splitlines()
    assert len(errors) == 3 and all(json.loads(x)["status"] == 500 for x in errors)
    notfound = cli(env, "log", "scrapeme", "--status", "404").stdout
    assert "/shop/page/7/" in notfound and "/robots.txt" in notfound and notfound.count("\n") == 2
    assert cli(env, "log", "scrapeme", "--domain", "elsewhere.example").stdout == ""


@pytest.mark.skipif(not (shutil.which("chromium") or shutil.which("chromium-browser")),
                    reason="Debian's chromium is not installed (make test installs it)")
@pytest.mark.alone  # its pace and latency figures are asserted
@pytest.mark.usefixtures("chromium")
def test_html_report_renders_its_charts_in_chromium(env, site, redis_client, mongo_db, tmp_path):
    pages = shop_pages(12 * 4, 4)
    shop = site(pages)
    redis_client.lpush("scrapeme:start_urls", f"{shop.url}/shop/")
    wait_all([start_worker("scrapeme", {**env, "DOMAIN_RATE": "4/s"}, tmp_path, "w")], 120)  # about 3 s
    path = tmp_path / "report.html"
    out = cli(env, "report", "scrapeme", "--html", str(path))
    assert out.returncode == 0, out.stderr
    text = path.read_text()
    assert "<script" not in text and "http://" not in text.split("</h1>", 1)[1].replace(shop.url, ""), "self-contained"

    from playwright.sync_api import sync_playwright
    from scrapy.settings import Settings

    from crawlhub.browser import CHROMIUM_ARGS, chromium_path
    from tests.helpers import project_settings

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium_path(Settings(project_settings())), args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 900, "height": 1400})
        page.goto(path.as_uri())
        shot = tmp_path / "report.png"
        page.screenshot(path=str(shot), full_page=True)
        charts = {}
        for chart in page.query_selector_all("svg.chart"):
            box = chart.bounding_box()
            marks = len(chart.query_selector_all("rect.bar, circle.point"))
            charts[chart.get_attribute("id")] = (box["width"], box["height"], marks)
        body_width = page.evaluate("document.body.clientWidth")
        tables = page.evaluate("[...document.querySelectorAll('table')].map(t => t.innerText)")
        points = len(page.query_selector_all("#pages-per-minute circle.point"))
        browser.close()
    assert set(charts) == {"pages-per-minute", "status-codes", "latency-per-domain", "items-per-collection"}
    for name, (width, height, marks) in charts.items():
        assert width > 0 and height > 0 and marks > 0, (name, width, height, marks)
        assert width >= 0.95 * body_width, f"{name} uses {width:.0f} of {body_width} px"
    assert points > 1, "a crawl of a few seconds is drawn in buckets of seconds, not one dot per minute"
    assert shot.stat().st_size > 10_000
    # the numbers behind the charts; the full domain name; a local page's latency is not the lowest bucket's 25 ms
    domain = domain_of(shop.url)
    (per_domain,) = [t for t in tables if t.startswith("domain")]
    assert domain in per_domain and ("<= 2 ms" in per_domain or "<= 5 ms" in per_domain or "<= 10 ms" in per_domain), per_domain
    assert any(t.startswith("collection") and "products\t48" in t for t in tables), tables


def test_status_counts_this_spiders_items_and_a_finished_crawl_has_no_pace(env, redis_client, mongo_db):
    mongo_db.products.insert_many([{"id": "1", "spiders": ["scrapeme"]}, {"id": "2", "spiders": ["scrapeme", "other"]}])
    mongo_db.authors.insert_one({"name": "someone else's", "spiders": ["quotes"]})
    now = time.time()
    finished = {"worker": "h:1", "host": "h", "pid": 1, "state": "finished", "reason": "finished", "started_at": now - 20,
                "last_beat": now - 5, "pages": 50, "items": 100, "errors": 0}
    redis_client.hset("scrapeme:workers", "h:1", json.dumps(finished))
    redis_client.hset(f"scrapeme:stats:m:{int(now // 60)}", mapping={"2xx": 50, "requests": 50})
    redis_client.lpush("scrapeme:start_urls", "https://example.com/")  # something left, nobody crawling
    data = status_json(env)
    assert data["items"]["stored"] == {"products": 2} and data["items"]["database"] == mongo_db.name
    assert data["pages_per_min_1m"] == 0 and data["pages_per_min_5m"] == 0, "no live worker: no pace"
    assert data["eta_seconds"] is None
    shown = cli(env, "status", "scrapeme")
    text = shown.stdout
    assert f"in database '{mongo_db.name}', stored by this spider: products=2" in text and "ETA: unknown" in text, shown.stderr
