"""Every request ends (issue #26, items 2-4 and 7): whichever way a page leaves Scrapy, its lease closes,
stored or in the dead-letter list with a non-empty reason, and the crawl ends in bounded time.

Real `scrapy crawl` workers, real Redis and MongoDB-wire servers, a local https site with hostile pages."""

from __future__ import annotations

import gzip
import json
import re
import signal
import time
from collections import Counter

import pytest

from tests.harness import cli, run_workers, start_worker, wait_all, wait_for
from tests.sites.server import refused_port
from tests.sites.shop import shop_pages

SPIDERS = "spiders,tests.sites.spiders"
PAGE = '<html><head><title>{0}</title></head><body>{1}</body></html>'


def hostile_pages() -> dict:
    links = ["/a", "/old", "/api/1", "/forbidden", "/bad", "/unauth", "/legal", "/notimpl", "/gz", "/ignored", "/huge"]
    return {
        "/": PAGE.format("home", " ".join(f'<a href="{u}">{u}</a>' for u in links)),
        "/a": PAGE.format("a", ""),
        "/b": PAGE.format("b", '<a href="/a">a</a>'),
        "/old": (301, "text/html", "", {"Location": "/b"}),
        "/api/1": PAGE.format("not json", ""),
        "/forbidden": (403, "text/html", PAGE.format("no", ""), {}),
        "/bad": (400, "text/html", PAGE.format("bad", ""), {}),
        "/unauth": (401, "text/html", PAGE.format("who", ""), {}),
        "/legal": (451, "text/html", PAGE.format("legal", ""), {}),
        "/notimpl": (501, "text/html", PAGE.format("501", ""), {}),
        # a body that says gzip and is not: Scrapy's HttpCompressionMiddleware raises in process_response
        "/gz": (200, "text/html", b"\x1f\x8b\x08\x00not gzip at all" + gzip.compress(b"x")[10:14],
                {"Content-Encoding": "gzip"}),
        "/ignored": PAGE.format("ignored", ""),
        # over DOWNLOAD_MAXSIZE, its length not said: Scrapy cancels the download once too much has come
        "/huge": (200, "text/html", PAGE.format("huge", "x" * 400_000), {"Content-Length": None}),
        "/kw": PAGE.format("kw", ""),
    }


def test_every_hostile_page_ends_stored_or_dead_lettered_with_its_reason(env, site, redis_client, mongo_db, tmp_path):
    web = site(hostile_pages(), tls=True)
    redis_client.lpush("t_hostile:start_urls", f"{web.url}/",
                       json.dumps({"url": f"{web.url}/kw", "callback": "parse_with", "cb_kwargs": {"wrong": 1}}))
    env = dict(env, SPIDER_MODULES=SPIDERS, RETRY_TIMES="0", DOWNLOAD_MAXSIZE="100000")
    (worker,) = run_workers("t_hostile", env, tmp_path, 1, timeout=90)

    stored = sorted(d["url"] for d in mongo_db.pages.find())
    assert stored == [f"{web.url}{p}" for p in ("/", "/a", "/b")]
    letters = {json.loads(r)["url"]: json.loads(r) for r in redis_client.lrange("t_hostile:dlq", 0, -1)}
    reasons = {url.removeprefix(web.url): letter["error"] for url, letter in letters.items()}
    assert sorted(reasons) == sorted(["/api/1", "/kw", "/forbidden", "/bad", "/unauth", "/legal", "/notimpl", "/gz",
                                      "/ignored", "/huge"]), reasons
    assert all(reasons.values()), f"a dead letter without a reason: {reasons}"
    assert reasons["/api/1"].startswith("callback error: JSONDecodeError"), reasons["/api/1"]
    assert reasons["/kw"].startswith("callback error: TypeError") and "wrong" in reasons["/kw"], reasons["/kw"]
    for path, status in (("/forbidden", 403), ("/bad", 400), ("/unauth", 401), ("/legal", 451), ("/notimpl", 501)):
        assert letters[f"{web.url}{path}"]["status"] == status and reasons[path].startswith(f"HTTP {status}"), reasons
    assert "gzip" in reasons["/gz"].lower() or "decompress" in reasons["/gz"].lower(), reasons["/gz"]
    assert "left Scrapy without reaching the spider" in reasons["/ignored"], reasons["/ignored"]
    assert "DOWNLOAD_MAXSIZE (100000 bytes)" in reasons["/huge"], reasons["/huge"]
    # nothing leased, nothing in flight, nothing queued: the crawl ended, and was not handed back
    assert redis_client.zcard("t_hostile:inflight") == 0 and redis_client.hlen("t_hostile:leases") == 0
    assert "unfinished requests back to the shared queue" not in worker.log()
    # the counters agree with the store and the DLQ
    status = json.loads(cli(env, "status", "t_hostile", "--json").stdout)
    assert status["totals"]["items"] == 3 and status["dlq"] == 10, status


@pytest.mark.timeout(420)
def test_a_dead_host_ends_in_the_dlq_within_minutes_with_the_default_settings(env, redis_client, tmp_path):
    """A host that refuses: with every default (robots.txt obeyed, its waits, the retries), the page is in the DLQ
    with the reason and the worker has ended within the documented bound (about 3 minutes), not half an hour."""
    dead = f"https://127.0.0.1:{refused_port()}/"
    redis_client.lpush("scrapeme:start_urls", dead)
    started = time.monotonic()
    (worker,) = run_workers("scrapeme", env, tmp_path, 1, timeout=300)
    took = time.monotonic() - started
    (letter,) = [json.loads(r) for r in redis_client.lrange("scrapeme:dlq", 0, -1)]
    assert letter["url"] == dead and "unavailable" in letter["error"] and "refused" in letter["error"].lower(), letter
    assert took < 300, f"the dead host took {took:.0f}s to end"
    assert redis_client.zcard("scrapeme:inflight") == 0 and redis_client.zcard("scrapeme:delayed") == 0


def test_counters_equal_the_store_when_a_worker_stopped_past_its_lease_stores_its_pages_again(
        env, site, redis_client, mongo_db, tmp_path):
    """A worker frozen (SIGSTOP) with pages in flight past the lease TTL: another takes its pages and stores
    them; thawed, the first stores the same items again. Status' items count documents, not writes."""
    shop = site(shop_pages(40, 4), tls=True, delay=0.6)  # 10 listing pages, slow enough to be caught in flight
    env = dict(env, LEASE_TTL="3", LEASE_RECLAIM_INTERVAL="1", MAX_IDLE_TIME_BEFORE_CLOSE="3",
               MONGO_FLUSH_INTERVAL="0.2")
    redis_client.lpush("scrapeme:start_urls", f"{shop.url}/shop/")
    frozen = start_worker("scrapeme", env, tmp_path, "frozen")
    assert wait_for(lambda: redis_client.zcard("scrapeme:inflight") >= 2, 60)
    frozen.proc.send_signal(signal.SIGSTOP)
    try:
        (other,) = run_workers("scrapeme", env, tmp_path, 1, timeout=120)
    finally:
        frozen.proc.send_signal(signal.SIGCONT)
    # its lease book mirrors <spider>:leases: the renewal after the thaw (every LEASE_TTL / 3 = 1 s) reports the
    # reclaimed leases lost (docs/frontier.md, "Mirrors")
    assert wait_for(lambda: "expired before this worker renewed them" in frozen.log(), 1 + 2), frozen.log()[-2000:]
    wait_all([frozen], 60)
    assert mongo_db.products.count_documents({}) == 40
    scraped = sum(int(m) for w in (frozen, other) for m in re.findall(r"'item_scraped_count': (\d+)", w.log()))
    assert scraped > 40, f"the frozen worker's pages were not stored twice ({scraped} scraped): nothing was tried"
    status = json.loads(cli(env, "status", "scrapeme", "--json").stdout)
    assert status["totals"]["items"] == 40 == sum(status["items"]["stored"].values()), (status["totals"], status["items"])
    # the workers' own counter (Prometheus, the web UI) says the same: both stopped cleanly, so both sent theirs
    counted = redis_client.hget("scrapeme:stats:totals", f"items@{status['epoch']['id']}")
    assert int(counted) == 40, counted


def test_a_redirect_to_a_host_of_another_partition_ends_its_lease_and_fetches_each_page_once(
        env, site, redis_client, mongo_db, tmp_path):
    """On a partitioned frontier a redirect's new request is queued in its host's partition, and the lease it replaces
    is in its own: before 20ba3e1 that lease stayed in flight until LEASE_TTL, was reclaimed, and its page was fetched
    again. Now each redirect is fetched once, nothing is reclaimed, and every landing page is stored once."""
    from crawlhub._utils.urls import domain_of
    from crawlhub.frontier.keys import partition_of

    partitions = 48
    landing = site({f"/landing/{i}": PAGE.format(f"landing {i}", "") for i in range(8)})
    for _ in range(5):  # (a host of another partition than the landing pages': 47 of 48 ports are)
        pages = {"/": PAGE.format("home", " ".join(f'<a href="/go/{i}">{i}</a>' for i in range(8)))}
        pages.update({f"/go/{i}": (302, "text/html", "", {"Location": f"{landing.url}/landing/{i}"}) for i in range(8)})
        start = site(pages, tls=True)
        if partition_of(domain_of(start.url), partitions) != partition_of(domain_of(landing.url), partitions):
            break
    assert partition_of(domain_of(start.url), partitions) != partition_of(domain_of(landing.url), partitions)
    env = dict(env, FRONTIER_PARTITIONS=str(partitions), LEASE_TTL="3", LEASE_RECLAIM_INTERVAL="1",
               MAX_IDLE_TIME_BEFORE_CLOSE="2", DOMAIN_RATE="0")
    redis_client.lpush("generic:start_urls", f"{start.url}/")
    (worker,) = run_workers("generic", env, tmp_path, 1, timeout=120)
    fetched = Counter(h.path for h in start.hits if h.path.startswith("/go/"))
    assert fetched == {f"/go/{i}": 1 for i in range(8)}, fetched
    assert "Reclaimed" not in worker.log() and "'leases/reclaimed'" not in worker.log(), worker.log()[-3000:]
    assert sorted(d["url"] for d in mongo_db.pages.find({"url": {"$regex": "/landing/"}})) == sorted(
        f"{landing.url}/landing/{i}" for i in range(8))
