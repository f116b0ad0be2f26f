"""Integration: proxies and header profiles, shared by the cluster.

Three real forward proxies on 127.0.0.1 (one healthy, one answering 403 to
everything, one refusing connections), real `scrapy crawl` workers, and a
local shop whose access log records every request's headers and the proxy it
came through (the proxies add ``Via``).
"""

from __future__ import annotations

import json
from collections import Counter

import pytest

from crawlhub._utils.urls import domain_of
from crawlhub.profiles import family_of, incoherence
from crawlhub.proxies import cool_key, tier_key
from tests.harness import all_redis_values, cli, run_workers
from tests.sites.quotes import quote_pages, quote_pages_js, render_handler, rendered
from tests.sites.server import LocalProxy, refused_port
from tests.sites.shop import shop_pages

SECRET = "s3cr3t-pw"


@pytest.fixture
def proxies():
    started = []

    def make(name, mode="ok", credentials=f"crawler:{SECRET}"):
        p = LocalProxy(name, mode, credentials).start()
        started.append(p)
        return p

    yield make
    for p in started:
        p.stop()


def pages_of(shop):
    return [h for h in shop.hits if h.path.startswith("/shop")]


def via(hit) -> str:
    return dict(hit.headers).get("Via", "")


def test_bad_proxies_cool_down_for_the_cluster_and_credentials_never_leak(env, site, redis_client, proxies, tmp_path):
    pages = shop_pages(24 * 6, 6)  # 24 listing pages
    shop = site(pages)
    domain = domain_of(shop.url)
    good, forbid = proxies("good"), proxies("forbid", "forbid")
    dead = f"http://crawler:{SECRET}@127.0.0.1:{refused_port()}"
    pools = {"datacenter": [good.url(), forbid.url(), {"url": dead, "name": "dead-one"}]}
    env = {**env, "PROXY_POOLS": json.dumps(pools), "PROXY_BAN_AFTER": "2", "PROXY_COOLDOWN": "120",
           "LOG_LEVEL": "DEBUG"}
    redis_client.lpush("scrapeme:start_urls", f"{shop.url}/shop/")
    first = run_workers("scrapeme", env, tmp_path / "first", 1, timeout=120)

    fetched = pages_of(shop)
    assert set(shop.fetched("/shop")) == set(pages), "every page is stored despite two bad proxies"
    assert all(via(h) == "1.1 good" for h in fetched), "only the healthy proxy reached the site"
    assert {p for p, status, _ in forbid.seen if status == 403}, "the 403 proxy was tried"
    cooling = {k.decode(): float(v) for k, v in redis_client.hgetall(cool_key(domain)).items()}
    forbid_id = f"datacenter/127.0.0.1:{forbid.port}#"
    assert any(k.startswith(forbid_id) for k in cooling), cooling
    assert "dead-one" in cooling, cooling
    forbid_calls = len(forbid.seen)
    assert forbid_calls >= 2, "cooled down after PROXY_BAN_AFTER failures, not before"
    items = {d["url"] for d in env_db(env).products.find()}
    assert len(items) == 24 * 6

    # a second worker, started later, reads the cool-downs from Redis and never uses them
    shop.hits.clear()
    good.seen.clear()
    assert cli(env, "reset", "scrapeme", "--yes").returncode == 0
    redis_client.lpush("scrapeme:start_urls", f"{shop.url}/shop/")
    second = run_workers("scrapeme", env, tmp_path / "second", 1, timeout=120)
    assert set(shop.fetched("/shop")) == set(pages)
    assert len(forbid.seen) == forbid_calls, "the second worker never used the cooling 403 proxy"
    log = second[0].log()
    assert "through proxy" not in log and "proxy/failures" not in log, "nor the refusing one: no failure at all"

    # credentials: not in any log line, not in any Redis key or value
    for worker in (*first, *second):
        log = worker.log()
        assert SECRET not in log and f"crawler:{SECRET}" not in log
        assert "Y3Jhd2xlcjpzM2NyM3QtcHc" not in log  # base64 of the credentials
    blob = all_redis_values(redis_client)
    assert SECRET.encode() not in blob and b"Y3Jhd2xlcjpzM2NyM3QtcHc" not in blob

    status = cli(env, "status", "scrapeme", "--json")
    assert status.returncode == 0, status.stderr
    shown = {p["id"]: p for p in json.loads(status.stdout)["proxies"]}
    assert SECRET not in status.stdout
    assert shown["dead-one"]["state"] in ("cooling", "dead") and shown["dead-one"]["failures"] >= 2
    good_id = next(i for i in shown if i.startswith(f"datacenter/127.0.0.1:{good.port}"))
    assert shown[good_id]["state"] == "ok" and shown[good_id]["success_rate"] == 1.0
    text = cli(env, "status", "scrapeme").stdout
    assert "dead-one" in text and "cooling until" in text and SECRET not in text


def env_db(env):
    import pymongo

    return pymongo.MongoClient(env["MONGO_URI"])[env["MONGO_DATABASE"]]


def test_escalation_to_the_residential_pool(env, site, redis_client, proxies, tmp_path):
    pages = shop_pages(10 * 4, 4)
    blocked = []

    def block_datacenter(shop, path):  # the site sees the Via of datacenter proxies and blocks them
        if shop.request_header("Via").startswith("1.1 dc"):
            blocked.append(path)
            return (403, "text/html", "<h1>Access denied</h1>", {})
        return None

    shop = site(pages, handler=block_datacenter)
    dc1, dc2, res = proxies("dc1"), proxies("dc2"), proxies("res1")
    pools = {"datacenter": [dc1.url(), dc2.url()], "residential": [res.url()]}
    env = {**env, "PROXY_POOLS": json.dumps(pools), "PROXY_BAN_AFTER": "1", "PROXY_ESCALATE_AFTER": "2"}
    redis_client.lpush("scrapeme:start_urls", f"{shop.url}/shop/")
    workers = run_workers("scrapeme", env, tmp_path, 2, timeout=120)

    ok = [h for h in pages_of(shop) if h.status == 200]
    assert {h.path for h in ok} == set(pages), "every page crawled"
    assert all(via(h) == "1.1 res1" for h in ok), Counter(via(h) for h in ok)
    assert blocked, "the datacenter proxies were tried first"
    assert redis_client.get(tier_key(domain_of(shop.url))) == b"residential"
    assert "every worker uses pool 'residential'" in "".join(w.log() for w in workers)
    assert env_db(env).products.count_documents({}) == 10 * 4


@pytest.mark.parametrize("policy", ["rotate", "sticky"])
def test_every_request_carries_one_coherent_profile(env, site, redis_client, proxies, tmp_path, policy):
    pages = shop_pages(30 * 4, 4)
    shop = site(pages)
    a, b = proxies("pa", credentials=""), proxies("pb", credentials="")
    env = {**env, "PROXY_POOLS": json.dumps({"dc": [a.url(), b.url()]}), "HEADER_PROFILES_POLICY": policy}
    redis_client.lpush("scrapeme:start_urls", f"{shop.url}/shop/")
    run_workers("scrapeme", env, tmp_path, 2, timeout=120)
    hits = pages_of(shop)
    assert {h.path for h in hits} == set(pages)
    by_proxy: dict[str, set[str]] = {}
    for h in hits:
        problems = incoherence([(k, v) for k, v in h.headers if k.lower() not in ("host", "via", "referer")])
        assert problems == [], (h.path, problems, h.headers)
        ua = dict(h.headers)["User-Agent"]
        assert family_of(ua)
        by_proxy.setdefault(via(h), set()).add(ua)
    profiles = set().union(*by_proxy.values())
    sites = Counter(dict(h.headers).get("Sec-Fetch-Site") for h in hits)
    assert sites["none"] >= 1 and sites["same-origin"] >= len(hits) - 2, sites  # the seed typed in; links followed
    if policy == "rotate":
        assert len(profiles) > 3, f"rotation shows several profiles: {profiles}"
    else:
        assert set(by_proxy) == {"1.1 pa", "1.1 pb"}
        assert all(len(uas) == 1 for uas in by_proxy.values()), f"each proxy keeps one profile on every worker: {by_proxy}"


def test_no_healthy_proxy_waits_then_dead_letters(env, site, redis_client, tmp_path):
    shop = site(shop_pages(4, 4))
    dead = f"http://crawler:{SECRET}@127.0.0.1:{refused_port()}"
    env = {**env, "PROXY_POOLS": json.dumps({"only": [dead]}), "PROXY_BAN_AFTER": "1", "PROXY_COOLDOWN": "1",
           "RETRY_TIMES": "1", "ROBOTSTXT_OBEY": "False"}
    redis_client.lpush("scrapeme:start_urls", f"{shop.url}/shop/")
    (worker,) = run_workers("scrapeme", env, tmp_path, 1, timeout=120)
    assert shop.hits == [], "nothing reached the site"
    letters = [json.loads(x) for x in redis_client.lrange("scrapeme:dlq", 0, -1)]
    assert [d["url"] for d in letters] == [f"{shop.url}/shop/"]
    assert letters[0]["error"].startswith("no healthy proxy"), letters[0]["error"]
    assert letters[0]["attempts"] == 2
    log = worker.log()
    assert "Retrying" in log and "no healthy proxy" in log and SECRET not in log


@pytest.mark.usefixtures("chromium")
def test_browser_pages_go_through_the_proxy_with_a_chromium_profile(env, site, redis_client, mongo_db, proxies, tmp_path):
    shop = site({**quote_pages(2, 4), **quote_pages_js(2, 4)}, handler=render_handler)
    good, forbid = proxies("bgood"), proxies("bforbid", "forbid")
    env = {**env, "PROXY_POOLS": json.dumps({"dc": [forbid.url(), good.url()]}), "PROXY_BAN_AFTER": "1"}
    redis_client.lpush("quotes_js:start_urls", f"{shop.url}/js/")
    (worker,) = run_workers("quotes_js", env, tmp_path, 1, timeout=180)
    assert sorted(rendered(shop)) == ["/js/", "/js/page/2/"]
    assert mongo_db.quotes.count_documents({}) == 8
    navigations = [h for h in shop.hits if h.path.startswith("/js/")]
    assert navigations and all(via(h) == "1.1 bgood" for h in navigations), [via(h) for h in navigations]
    for h in navigations:
        ua = dict(h.headers)["User-Agent"]
        assert family_of(ua) in ("chrome", "edge") and "Headless" not in ua, ua
        assert incoherence([(k, v) for k, v in h.headers if k.lower() not in ("host", "via", "referer", "cookie")]) == []
    # the page's own scripts (render.js) come through the same context: same User-Agent as the page
    scripts = [h for h in shop.hits if h.path.startswith("/static/")]
    assert scripts and {dict(h.headers)["User-Agent"] for h in scripts} == {dict(navigations[0].headers)["User-Agent"]}
    assert any(status == 403 for _, status, _ in forbid.seen), "the 403 proxy was tried and switched away from"
    assert SECRET not in worker.log()
    assert SECRET.encode() not in all_redis_values(redis_client)


def test_a_seed_asks_for_a_pool_and_a_country(env, site, redis_client, proxies, tmp_path):
    shop = site(shop_pages(2 * 4, 4))
    dc, res_de, res_us = proxies("dc", credentials=""), proxies("res-de", credentials=""), proxies("res-us", credentials="")
    pools = {"datacenter": [dc.url()],
             "residential": [{"url": res_de.url(), "country": "de"}, {"url": res_us.url(), "country": "us"}]}
    env = {**env, "PROXY_POOLS": json.dumps(pools), "ROBOTSTXT_OBEY": "False"}
    seed = {"url": f"{shop.url}/shop/", "meta": {"proxy_pool": "residential", "proxy_country": "US"}}
    assert cli(env, "seed", "scrapeme", json.dumps(seed)).returncode == 0
    run_workers("scrapeme", env, tmp_path, 1, timeout=120)
    by_path = {h.path: via(h) for h in pages_of(shop)}
    assert by_path["/shop/"] == "1.1 res-us", "the seed's pool and country"
    assert by_path["/shop/page/2/"] == "1.1 dc", "the pages it links to use the domain's pool"


def test_https_through_an_http_connect_proxy_with_credentials(env, site, redis_client, mongo_db, proxies, tmp_path):
    """The credentials go to the proxy (in the CONNECT) and nowhere else: not to the site, the logs or Redis."""
    pages = shop_pages(8 * 6, 6)
    shop = site(pages, tls=True)
    proxy = proxies("tunnel")
    env = {**env, "PROXY_POOLS": json.dumps({"datacenter": [proxy.url()]}), "LOG_LEVEL": "DEBUG"}
    redis_client.lpush("scrapeme:start_urls", f"{shop.url}/shop/")
    (worker,) = run_workers("scrapeme", env, tmp_path, 1, timeout=120)
    assert set(shop.fetched("/shop")) == set(pages) and mongo_db.products.count_documents({}) == 48
    tunnels = [(path, status, auth) for path, status, auth in proxy.seen]
    assert tunnels and all(path == f"127.0.0.1:{shop.port}" and status == 200 and auth for path, status, auth in tunnels)
    sent_to_site = [name.lower() for hit in shop.hits for name, _ in hit.headers]
    assert "proxy-authorization" not in sent_to_site and "via" not in sent_to_site, "the site saw the proxy's header"
    assert SECRET not in worker.log() and SECRET.encode() not in all_redis_values(redis_client)
    import base64

    assert base64.b64encode(f"crawler:{SECRET}".encode()).decode() not in worker.log()
