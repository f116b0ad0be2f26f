"""Integration: several real `scrapy crawl scrapeme` processes on one frontier."""

from __future__ import annotations

from collections import Counter

from tests.harness import run_workers, seen, start_worker, wait_all, worker_records
from tests.sites.shop import shop_pages, shop_products

PRODUCTS, PER_PAGE = 360, 8  # 45 listing pages


def listing_paths(pages: dict) -> set[str]:
    return {p for p in pages if p != "/shop/page/1/"} if "/shop/" in pages else set(pages)


def assert_products_once(mongo_db, products: int):
    docs = list(mongo_db.products.find({}, {"site": 1, "id": 1, "name": 1, "price": 1, "currency": 1}))
    ids = Counter(d["id"] for d in docs)
    assert len(docs) == products, f"{len(docs)} products stored, expected {products}"
    assert max(ids.values()) == 1, f"stored twice: {[k for k, v in ids.items() if v > 1][:5]}"
    assert set(ids) == {p["id"] for p in shop_products(products)}
    sample = next(d for d in docs if d["id"] == "700")
    assert (sample["name"], sample["price"], sample["currency"]) == ("Bulbasaur", "10.00", "GBP")


def test_three_workers_crawl_each_page_once(env, site, redis_client, mongo_db, tmp_path):
    pages = shop_pages(PRODUCTS, PER_PAGE)
    shop = site(pages, delay=0.2)
    assert len(pages) >= 40
    redis_client.lpush("scrapeme:start_urls", f"{shop.url}/shop/")

    # one request at a time per worker: the crawl is only fast if it is shared
    workers = run_workers("scrapeme", env, tmp_path, 3, CONCURRENT_REQUESTS=1)

    fetched = Counter(shop.fetched("/shop"))
    assert set(fetched) == set(pages), f"missing: {set(pages) - set(fetched)}"
    assert max(fetched.values()) == 1, f"fetched twice: {[p for p, n in fetched.items() if n > 1]}"
    records = worker_records(redis_client, "scrapeme")
    assert len(records) == 3 and all(r["state"] == "finished" for r in records)
    assert sum(r["pages"] for r in records) == len(pages)
    assert sum(1 for r in records if r["pages"] > 0) >= 2, f"work was not shared: {records}"
    assert_products_once(mongo_db, PRODUCTS)
    for worker in workers:
        assert "Traceback" not in worker.log()
        assert "Deprecat" not in worker.log(), worker.log()


def test_alias_of_page_one_and_overlapping_seeds_store_no_duplicates(env, site, redis_client, mongo_db, tmp_path):
    pages = shop_pages(120, PER_PAGE, alias_page_one=True)
    shop = site(pages, delay=0.05)
    for path in ("/shop/", "/shop/page/3/", "/shop/page/1/"):
        redis_client.lpush("scrapeme:start_urls", f"{shop.url}{path}")

    run_workers("scrapeme", env, tmp_path, 2, CONCURRENT_REQUESTS=4)

    fetched = Counter(shop.fetched("/shop"))
    # page 1 really was fetched under two URLs: its products reached the pipelines twice
    assert fetched["/shop/"] == 1 and fetched["/shop/page/1/"] == 1
    assert_products_once(mongo_db, 120)


def test_bad_seeds_are_set_aside_and_the_crawl_completes(env, site, redis_client, mongo_db, tmp_path):
    shop = site(shop_pages(40, PER_PAGE))
    bad = {
        "ftp://example.org/file": "scheme 'ftp'",
        "not a url": "whitespace",
        "example.org/shop/": "scheme '(none)'",
        "http:///nohost": "no host",
        '{"url": 5}': "'url' must be a JSON str",
        '{"url": "http://x.org/", "priority": "high"}': "'priority' must be a JSON int",
        '{"meta": {}}': "has no 'url'",
        "{not json": "bad JSON",
        '{"url": "http://x.org/", "pickle": 1}': "unknown keys",
        "http://x.org/" + "a" * 9000: "over the 8192-byte limit",
        # callbacks the frontier cannot store by name (Scrapy's own static and class methods, a private one): at the
        # shop, so that one taken would be fetched, kept in the worker's memory and end nowhere
        **{f'{{"url": "{shop.url}/shop/?cb={cb}", "callback": "{cb}"}}': f"callback '{cb}' is not a method of spider "
           "'scrapeme'" for cb in ("close", "from_crawler", "_parse", "no_such")},
        f'{{"url": "{shop.url}/shop/?cb=method", "method": "GET /shop/ HTTP/1.1\\r\\nX: y"}}': "is not an HTTP method",
        # crawlhub's own meta: a seed's crawlhub_end would end it unfetched (nowhere: it holds no lease)
        f'{{"url": "{shop.url}/shop/?cb=meta", "meta": {{"crawlhub_end": {{"how": "drop"}}}}}}': "are crawlhub's own",
    }
    redis_client.lpush("scrapeme:start_urls", *bad)
    redis_client.lpush("scrapeme:start_urls", f'{{"url": "{shop.url}/shop/", "meta": {{"job": "t1"}}, "priority": 5}}')

    (worker,) = run_workers("scrapeme", env, tmp_path, 1)

    records = [__import__("json").loads(r) for r in redis_client.lrange("scrapeme:bad_seeds", 0, -1)]
    assert len(records) == len(bad)
    by_seed = {r["seed"]: r["reason"] for r in records}
    for seed, reason in bad.items():
        assert reason in by_seed[seed], (seed, by_seed[seed])
    assert worker.log().count("Bad seed") == len(bad)
    assert "cannot be stored as JSON" not in worker.log() and not shop.fetched("/shop/?cb=")
    assert mongo_db.products.count_documents({}) == 40
    assert redis_client.llen("scrapeme:start_urls") == 0


def test_worker_that_finishes_early_leaves_the_frontier_intact(env, site, redis_client, mongo_db, tmp_path):
    pages = shop_pages(40 * 4, 4, chain=True)  # 40 pages, each linking to the next only
    shop = site(pages, delay=0.3)
    redis_client.lpush("scrapeme:start_urls", f"{shop.url}/shop/")
    # a worker told not to persist, that stops after 4 seconds while the crawl goes on
    early = start_worker("scrapeme", env, tmp_path, "early", CLOSESPIDER_TIMEOUT=4, SCHEDULER_PERSIST=False,
                         SCHEDULER_FLUSH_ON_START=True, CONCURRENT_REQUESTS=1)
    steady = start_worker("scrapeme", env, tmp_path, "steady", CONCURRENT_REQUESTS=1)
    assert early.wait(60) == 0, early.log()[-3000:]
    fetched_when_early_left = len(shop.fetched("/shop"))
    assert fetched_when_early_left < len(pages), "the early worker did not finish early"
    assert "Closing spider (closespider_timeout)" in early.log()
    assert "SCHEDULER_PERSIST=False is ignored" in early.log()
    assert "SCHEDULER_FLUSH_ON_START=True is ignored" in early.log() and "crawlhub reset" in early.log()
    assert seen(redis_client, "scrapeme") >= fetched_when_early_left

    wait_all([steady], 90)

    fetched = Counter(shop.fetched("/shop"))
    assert set(fetched) == set(pages)
    # a page the early worker was fetching when it stopped is given back and fetched again
    assert max(fetched.values()) <= 2 and sum(fetched.values()) <= len(pages) + 1
    assert seen(redis_client, "scrapeme") == len(pages)
    assert redis_client.zcard("scrapeme:inflight") == 0
    assert_products_once(mongo_db, 160)


def test_bloom_duplicate_filter_by_setting(env, site, redis_client, mongo_db, tmp_path):
    pages = shop_pages(20 * 8, 8)
    shop = site(pages)
    env = dict(env, DUPEFILTER_MODE="bloom", DUPEFILTER_BLOOM_CAPACITY="10000")
    redis_client.lpush("scrapeme:start_urls", f"{shop.url}/shop/")
    run_workers("scrapeme", env, tmp_path, 2)

    fetched = Counter(shop.fetched("/shop"))
    assert set(fetched) == set(pages) and max(fetched.values()) == 1
    assert redis_client.strlen("scrapeme:dupefilter:bloom") > 0
    assert not [k for k in redis_client.keys("scrapeme:dupefilter:*") if redis_client.type(k) == b"set"], "no exact filter"
    assert seen(redis_client, "scrapeme") == len(pages)
    assert mongo_db.products.count_documents({}) == 160
