"""The ladder (plain -> impersonate -> browser) on a site that checks how a client opens TLS (#31).

The site (tests.sites.server.LocalSite with ``fingerprints``) answers 403 to any connection whose TLS
ClientHello's JA4 is not a real browser's (tests.sites.fingerprint.BROWSERS: Debian's Chromium, measured),
as an anti-bot service does, whatever the request's headers say.
"""

from __future__ import annotations

import json
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections import Counter

import pytest
from scrapy.settings import Settings

from crawlhub.browser import chromium_path
from crawlhub.frontier.scripts import Script
from crawlhub.ladder import BLOCKS, LADDER, SCRIPT, read_ladder
from crawlhub.proxies import cool_key
from tests.harness import all_redis_values, cli, http, run_workers, start_ui, start_worker, wait_all, wait_for
from tests.sites.fingerprint import BROWSERS
from tests.sites.server import LocalProxy
from tests.sites.shop import CHALLENGE, challenged, shop_pages

CHROME = {"HEADER_PROFILES_FAMILIES": "chrome"}  # Chrome profiles: the impersonate rung goes out as Chrome


def _unverified() -> ssl.SSLContext:
    return ssl._create_unverified_context()  # the test site's certificate is self-signed


def test_the_test_site_takes_chromiums_own_tls_and_refuses_a_scripts(site):
    """The fingerprint list is a real browser's: Chromium itself gets through, Python's OpenSSL client does not."""
    # a dozen images: Chromium opens several connections, the later ones resuming the first one's TLS session
    pages = {"/": "<html><body>" + "".join(f'<img src="/i{i}.png">' for i in range(12)) + "</body></html>"}
    pages.update({f"/i{i}.png": (200, "image/png", b"\x89PNG", {}) for i in range(12)})
    checked = site(pages, tls=True, fingerprints=BROWSERS, delay=0.2)
    try:
        urllib.request.urlopen(checked.url + "/", context=_unverified(), timeout=10)
        raise AssertionError("a plain client got through")
    except urllib.error.HTTPError as exc:
        assert exc.code == 403
    subprocess.run([chromium_path(Settings()), "--headless", "--no-sandbox", "--disable-gpu", "--ignore-certificate-errors",
                    "--dump-dom", checked.url + "/"], capture_output=True, timeout=120, check=False)
    hits = [(h.status, h.ja4) for h in checked.hits if h.path != "/favicon.ico"]  # (Chromium may ask for one: a 404)
    assert hits[0][0] == 403 and hits[0][1] and hits[0][1] not in BROWSERS
    chromium = set(hits[1:])
    # Chromium's own, a new session and a resumed one, both in BROWSERS: every one of its requests got through
    assert chromium == {(200, "t13i1516h2_8daaf6152771_cb7bf5808d99"), (200, "t13i1517h2_8daaf6152771_e2d80978ab2e")}, hits
    assert len(hits) == 1 + 13


def test_plain_scrapy_gets_nothing_from_a_site_that_checks_the_tls_fingerprint(env, site, redis_client, mongo_db, tmp_path):
    shop = site(shop_pages(60, 6), tls=True, fingerprints=BROWSERS)
    redis_client.lpush("scrapeme:start_urls", f"{shop.url}/shop/")
    run_workers("scrapeme", env, tmp_path, 1, timeout=120, LADDER_ENABLED="False", **CHROME)
    assert shop.hits and all(h.status == 403 and h.ja4 not in BROWSERS for h in shop.hits)
    assert mongo_db.products.count_documents({}) == 0


def test_crawlhub_climbs_to_the_impersonate_rung_by_itself_and_stores_every_page(env, site, redis_client, mongo_db,
                                                                                 tmp_path):
    """3 workers: the domain climbs after LADDER_CLIMB_AFTER blocks, each blocked page is fetched again on the
    impersonate rung (none lost), every stored page came through a browser's ClientHello, no Chromium."""
    pages = shop_pages(200, 10)
    shop = site(pages, tls=True, fingerprints=BROWSERS)
    redis_client.lpush("scrapeme:start_urls", f"{shop.url}/shop/")
    workers = run_workers("scrapeme", env, tmp_path, 3, timeout=180, **CHROME)
    domain = f"127.0.0.1:{shop.port}"
    assert mongo_db.products.count_documents({}) == 200
    assert len(mongo_db.products.distinct("url")) == 200
    answered = {h.path for h in shop.hits if h.status == 200}
    assert answered >= set(pages), set(pages) - answered
    assert all(h.ja4 in BROWSERS for h in shop.hits if h.status == 200)
    # each page was blocked on the plain rung at most once: its replacement went a rung up
    blocked = Counter(h.path for h in shop.hits if h.status == 403 and h.path.startswith("/shop"))
    assert blocked and max(blocked.values()) == 1, blocked
    assert all(h.ja4 not in BROWSERS for h in shop.hits if h.status == 403)
    state = read_ladder(redis_client)[domain]
    assert state["rung"] == "impersonate" and state["from"] == "plain" and "HTTP 403" in state["why"]
    logs = "".join(w.log() for w in workers)
    assert "every worker sends it on the impersonate rung now" in logs
    assert "Launching browser" not in logs and "Browser:" not in logs  # Chromium never started
    status = cli(env, "status", "scrapeme")
    assert status.returncode == 0 and f"{domain}" in status.stdout and "impersonate" in status.stdout
    # the report and crawlhub ui show the rung, why it moved and when it is probed
    assert cli(env, "report", "scrapeme", "--html", str(tmp_path / "r.html")).returncode == 0
    page = (tmp_path / "r.html").read_text()
    assert "domains off the plain rung" in page and f"<td>{domain}</td><td>impersonate</td>" in page
    assert "HTTP 403 on plain" in page and "plain in " in page
    ui, base = start_ui(env, tmp_path)
    try:
        code, _, body = http(base + "/api/spiders/scrapeme/status")
    finally:
        ui.kill()
    rows = json.loads(body)["ladder_rows"]
    assert code == 200 and [r[:2] for r in rows] == [[domain, "impersonate"]] and "HTTP 403 on plain" in rows[0][3]


def test_the_impersonate_rung_goes_through_the_proxy_and_no_proxy_is_blamed(env, site, redis_client, mongo_db,
                                                                            tmp_path):
    """A site that refuses how a client opens TLS refuses every proxy alike: the rung climbs, the proxy is not
    cooled down; the impersonated requests go through the proxy's CONNECT with its credentials, which reach
    neither the site, the logs nor Redis."""
    secret = "pr0xy-s3cret"
    proxy = LocalProxy("tunnel", "ok", f"crawler:{secret}").start()
    try:
        shop = site(shop_pages(60, 6), tls=True, fingerprints=BROWSERS)
        env = {**env, "PROXY_POOLS": json.dumps({"datacenter": [proxy.url()]}), "LOG_LEVEL": "DEBUG"}
        redis_client.lpush("scrapeme:start_urls", f"{shop.url}/shop/")
        (worker,) = run_workers("scrapeme", env, tmp_path, 1, timeout=120, **CHROME)
    finally:
        proxy.stop()
    assert mongo_db.products.count_documents({}) == 60
    assert all(h.ja4 in BROWSERS for h in shop.hits if h.status == 200 and h.path.startswith("/shop"))
    tunnels = [(path, status, auth) for path, status, auth in proxy.seen]
    assert tunnels and all(path == f"127.0.0.1:{shop.port}" and status == 200 and auth for path, status, auth in tunnels)
    sent_to_site = [name.lower() for hit in shop.hits for name, _ in hit.headers]
    assert "proxy-authorization" not in sent_to_site
    assert secret not in worker.log() and secret.encode() not in all_redis_values(redis_client)
    assert not redis_client.exists(cool_key(f"127.0.0.1:{shop.port}"))  # no proxy cooled down on the domain
    assert read_ladder(redis_client)[f"127.0.0.1:{shop.port}"]["rung"] == "impersonate"


def test_a_redirect_on_the_impersonate_rung_is_followed_by_scrapy(env, site, redis_client, mongo_db, tmp_path):
    """A redirect is an answer like any: blocked on plain, its replacement gets the 301 on the impersonate rung,
    and Scrapy's redirect middleware follows it there (the page's rung goes with it)."""
    pages = shop_pages(30, 6)
    pages["/old-shop/"] = (301, "text/html", "", {"Location": "/shop/"})
    shop = site(pages, tls=True, fingerprints=BROWSERS)
    redis_client.lpush("scrapeme:start_urls", f"{shop.url}/old-shop/")
    run_workers("scrapeme", env, tmp_path, 1, timeout=120, **CHROME)
    assert mongo_db.products.count_documents({}) == 30
    moved = [h for h in shop.hits if h.path == "/old-shop/"]
    assert [h.status for h in moved] == [403, 301] and moved[1].ja4 in BROWSERS
    assert [h.status for h in shop.hits if h.path == "/shop/"][0] == 200  # the redirect stayed on its rung
    assert all(h.ja4 in BROWSERS for h in shop.hits if h.status == 200)


def test_a_domain_comes_back_to_plain_when_the_site_stops_checking(env, site, redis_client, mongo_db, tmp_path):
    """De-escalation: after LADDER_PROBE_AFTER one request probes the plain rung; not blocked, the domain is
    plain again for every worker, and the rest of the crawl goes out through Scrapy's own client."""
    pages = shop_pages(40, 1, chain=True)  # one page at a time: the crawl goes on after the site relaxes
    shop = site(pages, tls=True, fingerprints=BROWSERS, delay=0.1)
    redis_client.lpush("scrapeme:start_urls", f"{shop.url}/shop/")
    domain = f"127.0.0.1:{shop.port}"
    worker = start_worker("scrapeme", env, tmp_path, "w0", LADDER_PROBE_AFTER="1", **CHROME)
    try:
        assert wait_for(lambda: read_ladder(redis_client).get(domain, {}).get("rung") == "impersonate", 60)
        relaxed = time.time()
        shop.fingerprints = None  # the site stops checking
        wait_all([worker], 120)
    finally:
        worker.kill()
    assert domain not in read_ladder(redis_client)
    assert mongo_db.products.count_documents({}) == 40
    after = [h for h in shop.hits if h.arrived > relaxed + 1 and h.path.startswith("/shop")]
    assert after and after[-1].status == 200 and after[-1].ja4 not in BROWSERS  # plain again
    assert "is not blocked on the plain rung any more" in worker.log()


@pytest.mark.usefixtures("chromium")
def test_a_javascript_challenge_takes_the_domain_up_both_rungs_to_the_browser(env, site, redis_client, mongo_db,
                                                                                tmp_path):
    """Every page answers 200 with a challenge that only a browser gets past (a ban marker for the others): the
    domain climbs plain -> impersonate -> browser by itself, each blocked page is fetched again a rung up, and
    every product is stored once, from what Chromium rendered."""
    shop = site(challenged(shop_pages(160, 8)), tls=True)
    env = {**env, "PROXY_BAN_MARKERS": json.dumps([CHALLENGE.lower()]), "BROWSER_ENABLED": "True",
           "LADDER_CLIMB_AFTER": "2", **CHROME}
    redis_client.lpush("scrapeme:start_urls", f"{shop.url}/shop/")
    (worker,) = run_workers("scrapeme", env, tmp_path, 1, timeout=240)

    assert mongo_db.products.count_documents({}) == len(mongo_db.products.distinct("url")) == 160
    state = read_ladder(redis_client)[f"127.0.0.1:{shop.port}"]
    assert state["rung"] == "browser" and state["from"] == "impersonate", state
    log = worker.log()
    assert "every worker sends it on the impersonate rung now" in log
    assert "every worker sends it on the browser rung now" in log
    # no page was fetched more than once per rung: plain, impersonate, browser
    per_page = Counter(h.path for h in shop.hits if h.path.startswith("/shop"))
    assert set(per_page) == {"/shop/", *(f"/shop/page/{n}/" for n in range(2, 21))} and max(per_page.values()) <= 3


def test_the_ladder_script_climbs_once_probes_once_and_backs_off(redis_client):
    ladder = Script(redis_client, SCRIPT)

    def call(op: str, rung: str, *args) -> tuple[dict | None, int]:
        raw, moved = ladder([LADDER, BLOCKS], [op, "example.com", rung, "1000.000", *args])
        return (json.loads(raw) if raw else None), int(moved)

    assert call("block", "plain", 3, "impersonate", 60, "HTTP 403") == (None, 0)
    assert call("block", "plain", 3, "impersonate", 60, "HTTP 403") == (None, 0)
    state, moved = call("block", "plain", 3, "impersonate", 60, "HTTP 403")
    assert moved == 1 and state["rung"] == "impersonate" and state["probe_at"] == 1060 and state["from"] == "plain"
    assert redis_client.hget(BLOCKS, "example.com\tplain") is None  # counted afresh after a move
    # another worker's block on the old rung changes nothing
    assert call("block", "plain", 3, "impersonate", 60, "HTTP 403") == (state, 0)
    # the probe: not before its time, then one claim only
    assert call("probe", "impersonate")[1] == 0
    raw, moved = ladder([LADDER, BLOCKS], ["probe", "example.com", "impersonate", "1061"])
    assert int(moved) == 1 and json.loads(raw)["probe_at"] == 1121
    raw, moved = ladder([LADDER, BLOCKS], ["probe", "example.com", "impersonate", "1062"])
    assert int(moved) == 0
    # a blocked probe doubles the back-off (up to the most), a clean one brings the domain down
    raw, _ = ladder([LADDER, BLOCKS], ["probed", "example.com", "plain", "1070", "", 60, 100])
    assert json.loads(raw)["backoff"] == 100 and json.loads(raw)["probe_at"] == 1170
    raw, moved = ladder([LADDER, BLOCKS], ["probed", "example.com", "plain", "1200", "1", 60, 100])
    assert raw == b"" and int(moved) == 1 and not redis_client.hexists(LADDER, "example.com")
