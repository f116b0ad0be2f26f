"""`crawlhub ui`: the page in Debian's Chromium (through Playwright) over a real 2-worker crawl, and its API."""


from __future__ import annotations

import json
import os
import re
import threading
import time
from pathlib import Path

import pytest

from crawlhub.browser import CHROMIUM_ARGS
from crawlhub.frontier.records import DeadLetter
from tests.harness import ROOT, cli, http, start_ui, start_worker, wait_all, wait_for
from tests.sites.server import refused_port
from tests.sites.shop import shop_pages

# where the test leaves its screenshot for people to look at (docs/img/ui.png, on docs/ui.md, is a copy)
ARTIFACTS = Path(os.environ.get("CRAWLHUB_TEST_ARTIFACTS", ROOT / "test-artifacts"))


@pytest.mark.alone  # it reads a live crawl's counts as they move: under 6 processes the page loaded late, twice
@pytest.mark.usefixtures("chromium")
def test_the_page_shows_a_two_worker_crawl_live_and_pauses_and_resumes_it(env, site, redis_client, mongo_db, tmp_path,
                                                                         chromium):
    from playwright.sync_api import sync_playwright

    # 150 listing pages of 4 products at 5 pages/s: a 30 s crawl, long enough to watch it move and pause it
    # midway on a slow machine (CI took 12 s to get from the first page to the pause)
    products = 150 * 4
    pages = shop_pages(products, 4)
    broken = "/shop/page/3/"
    good_page = pages[broken]
    pages[broken] = (500, "text/html", "<h1>down</h1>", {})  # a dead letter, fixed and requeued from the page
    # listing pages past the 40th wait for the pause: it lands mid-crawl however fast or slow the machine
    # (CI once crawled all 150 before the page paused)
    release = threading.Event()

    def held_back(site, path: str) -> None:
        number = re.match(r"^/shop/page/(\d+)/$", path)
        if number and int(number.group(1)) > 40:
            release.wait(120)
        return None

    shop = site(pages, tls=True, handler=held_back)
    env = {**env, "DOMAIN_RATE": "5/s", "WORKER_HEARTBEAT_INTERVAL": "1", "CLUSTER_STATS_INTERVAL": "0.5",
           "RETRY_TIMES": "1", "RETRY_BACKOFF_BASE": "0.2"}
    redis_client.lpush("scrapeme:start_urls", f"{shop.url}/shop/", "not a url")
    workers = [start_worker("scrapeme", env, tmp_path, f"w{i}") for i in range(2)]
    ui, base = start_ui(env, tmp_path, "--interval", "0.5")
    asked: list[str] = []

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
        # bypass_csp: Playwright evaluates the test's own waits as strings, which the page's policy forbids
        page = browser.new_page(viewport={"width": 1400, "height": 1000}, bypass_csp=True)
        page.on("request", lambda request: asked.append(request.url))
        page.goto(f"{base}/#scrapeme")

        def number(element: str) -> int | None:
            text = page.text_content(f"#{element}").replace(",", "").strip()
            return int(text) if text.isdigit() else None

        # the counts move: two different readings of queued and of stored, without reloading the page
        first = wait_for(lambda: (number("stored") or 0) > 0 and (number("queued"), number("stored")), 60)
        assert first, "the page shows stored items"
        later = wait_for(lambda: (number("stored") or 0) > first[1] and (number("queued"), number("stored")), 30)
        assert later and later[1] > first[1], f"stored did not move from {first[1]}"
        assert wait_for(lambda: number("queued") != first[0], 30), "queued did not move"
        # the worker list, and a chart with its data drawn
        page.wait_for_function("document.querySelectorAll('#workers tbody tr').length === 2", timeout=20000)
        assert [page.text_content(f"#workers tbody tr:nth-child({i}) td:nth-child(3)") for i in (1, 2)] == ["running"] * 2
        page.wait_for_function("""() => {
            const line = document.querySelector('#chart-pages svg polyline');
            const dots = document.querySelectorAll('#chart-pages svg circle.point');
            return line && line.getAttribute('points').trim().split(' ').length >= 2 && dots.length >= 2 &&
                   [...dots].some(d => parseFloat(d.getAttribute('cy')) < 200);
        }""", timeout=30000)
        assert page.locator("#chart-codes svg rect").count() > 0
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "ui.png"), full_page=True)
        print(f"screenshot: {ARTIFACTS / 'ui.png'}")

        # pause: the site sees no request FRONTIER_POLL_INTERVAL (0.5 s, docs/cli.md) after the page says paused
        page.click("#pause")
        page.wait_for_selector("#state.paused", timeout=10000)
        paused_at = time.time()
        assert redis_client.exists("scrapeme:paused")
        time.sleep(4)
        late = [h.path for h in shop.hits if h.arrived > paused_at + 0.5]
        assert late == [], f"requests after the pause: {late}"
        assert len(shop.fetched("/shop")) < len(pages), "the pause came before the end"
        page.wait_for_function("document.getElementById('state').textContent === 'paused'", timeout=10000)
        release.set()  # (the requests held back were sent before the pause: answered now)

        # the dead letter and the bad seed are listed; the page is fixed and its letter requeued from the page
        assert wait_for(lambda: redis_client.llen("scrapeme:dlq") == 1, 20), "the broken page is a dead letter"
        page.click("#open-dlq")
        page.wait_for_selector(f"#list tbody tr td:text-is('{shop.url}{broken}')", timeout=10000)
        pages[broken] = good_page
        page.click("#list tbody tr button")
        page.wait_for_function("document.getElementById('list-note').textContent.startsWith('0 in all')", timeout=10000)
        assert redis_client.llen("scrapeme:dlq") == 0
        page.click("#close-list")
        page.click("#open-bad-seeds")
        page.wait_for_selector("#list tbody tr td:text-is('not a url')", timeout=10000)
        page.click("#close-list")

        # resume: the crawl finishes, the broken page's products included, and the page shows it
        page.click("#resume")
        wait_all(workers, 180)
        assert set(shop.fetched("/shop")) == set(pages), "the crawl completes after resume"
        assert mongo_db.products.count_documents({}) == products, "every product stored, the requeued page's too"
        page.wait_for_function(f"document.getElementById('stored').textContent.replace(/,/g, '') === '{products}'",
                               timeout=30000)
        browser.close()

    outside = [url for url in asked if not url.startswith(base + "/")]
    assert asked and outside == [], f"the page asked elsewhere: {outside}"


def test_off_loopback_the_page_and_its_api_need_the_token(env, redis_client, tmp_path):
    refused = cli(env, "ui", "--host", "0.0.0.0", "--port", str(refused_port()))
    assert refused.returncode == 2 and "CRAWLHUB_UI_TOKEN" in refused.stderr and "not a loopback" in refused.stderr

    token = "s3cret-token-for-the-test-" + "x" * 20
    ui, base = start_ui({**env, "CRAWLHUB_UI_TOKEN": token}, tmp_path, "--host", "0.0.0.0", token=token)
    for path in ("/", "/static/app.js", "/api/spiders", "/api/spiders/scrapeme/status", "/api/spiders/scrapeme/events",
                 "/api/spiders/scrapeme/dlq", "/api/spiders/scrapeme/bad-seeds", "/api/spiders/scrapeme/charts"):
        assert http(base + path)[0] == 401, f"{path} without the token"
        assert http(base + path, headers={"Authorization": "Bearer wrong"})[0] == 401, f"{path} with a wrong token"
    status, headers, _ = http(base + "/api/spiders/scrapeme/pause", {}, headers={"X-Crawlhub": "1"})
    assert status == 401 and "Bearer" in headers["WWW-Authenticate"] and not redis_client.exists("scrapeme:paused")

    bearer = {"Authorization": f"Bearer {token}"}
    status, _, body = http(base + "/api/spiders", headers=bearer)
    assert status == 200 and "scrapeme" in [s["spider"] for s in json.loads(body)["spiders"]]
    # the page opened with ?token= sets a cookie its own requests carry from then on
    status, headers, body = http(base + f"/?token={token}")
    assert status == 200 and b"crawlhub" in body and "HttpOnly" in headers["Set-Cookie"]
    cookie = {"Cookie": headers["Set-Cookie"].split(";")[0]}
    assert http(base + "/api/spiders/scrapeme/status", headers=cookie)[0] == 200
    # a change needs X-Crawlhub: 1 (no cross-site form can send it)
    assert http(base + "/api/spiders/scrapeme/pause", {}, headers=bearer)[0] == 403
    assert http(base + "/api/spiders/scrapeme/pause", {}, headers={**bearer, "X-Crawlhub": "1"})[0] == 200
    assert redis_client.exists("scrapeme:paused")
    assert http(base + "/api/spiders/nosuch/status", headers=bearer)[0] == 404

    # requeue from the API: a bad seed goes back to the seeds; a dead letter back to its domain's queue
    redis_client.lpush("scrapeme:bad_seeds", json.dumps({"seed": "https://shop.test/x", "reason": "fixed since", "at": 1}))
    letter = DeadLetter("https://shop.test/y", "scrapeme", 3, 500, "", 1.0, 2.0, "w1",
                        json.dumps({"url": "https://shop.test/y", "meta": {}}))
    redis_client.lpush("scrapeme:dlq", letter.to_json())
    change = {**bearer, "X-Crawlhub": "1"}
    (entry,) = json.loads(http(base + "/api/spiders/scrapeme/bad-seeds", headers=bearer)[2])["entries"]
    assert http(base + "/api/spiders/scrapeme/bad-seeds/requeue", {"ids": ["nosuch"]}, headers=change)[0] == 200
    assert redis_client.llen("scrapeme:bad_seeds") == 1, "an unknown id requeues nothing"
    assert http(base + "/api/spiders/scrapeme/bad-seeds/requeue", {}, headers=change)[0] == 400
    answer = json.loads(http(base + "/api/spiders/scrapeme/bad-seeds/requeue", {"ids": [entry["id"]]}, headers=change)[2])
    assert answer["requeued"] == 1 and redis_client.lrange("scrapeme:start_urls", 0, -1) == [b"https://shop.test/x"]
    assert redis_client.llen("scrapeme:bad_seeds") == 0
    (dead,) = json.loads(http(base + "/api/spiders/scrapeme/dlq", headers=bearer)[2])["entries"]
    assert dead["url"] == "https://shop.test/y" and dead["status"] == 500
    assert json.loads(http(base + "/api/spiders/scrapeme/dlq/requeue", {"all": True}, headers=change)[2])["requeued"] == 1
    assert redis_client.llen("scrapeme:dlq") == 0 and int(redis_client.hget("scrapeme:queued", "shop.test")) == 1

    ui.proc.terminate()
    assert ui.proc.wait(15) == 0
    assert token not in ui.log(), "the token never reaches the log"


def test_on_loopback_it_answers_loopback_names_only(env, redis_client, tmp_path):
    ui, base = start_ui(env, tmp_path)
    assert http(base + "/api/spiders")[0] == 200, "loopback needs no token"
    assert http(base + "/api/spiders", headers={"Host": "attacker.example"})[0] == 421, "a rebound name is refused"
    status, headers, body = http(base + "/")
    assert status == 200 and "default-src 'self'" in headers["Content-Security-Policy"]
    assert b"/static/app.js" in body and b"http" not in body.split(b"<body>")[0].replace(b"http-equiv", b"")


def test_a_latency_past_the_last_bucket_is_shown_and_charted(redis_client, redis_url, mongo_uri, mongo_db, monkeypatch):
    from crawlhub.addon import tool_settings
    from crawlhub.ui.app import Dashboard

    for name, value in (("REDIS_URL", redis_url), ("MONGO_URI", mongo_uri), ("MONGO_DATABASE", mongo_db.name)):
        monkeypatch.setenv(name, value)
    redis_client.hset("scrapeme:stats:totals", mapping={"requests": 2, "error": 2, "lat:inf": 2, "d|slow.test|requests": 2,
                                                        "d|slow.test|error": 2, "d|slow.test|lat:inf": 2})
    dashboard = Dashboard(tool_settings(), redis_client, mongo_db.client, interval=0.5)
    status = dashboard.status("scrapeme")
    json.dumps(status, allow_nan=False)
    assert status["latency_ms"]["p95"] == "inf" and status["domains"][0]["p95_ms"] == "inf"
    assert "slow.test" in dashboard.charts("scrapeme")["latency"]
