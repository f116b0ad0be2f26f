"""Integration: retries through the frontier, the dead-letter queue, Retry-After, the crawl budget."""

from __future__ import annotations

import json
import shutil
from collections import Counter

from crawlhub._utils.urls import domain_of
from tests.harness import ROOT, cli, queued, run_workers, start_worker, wait_all, worker_records
from tests.sites.shop import shop_pages

FAST_RETRY = {"RETRY_BACKOFF_BASE": 0.2, "RETRY_TIMES": 2}




class Flaky:
    """A handler: given paths fail `fails[path]` times (with `status`), then serve the page."""

    def __init__(self, fails: dict[str, int], status: int = 500, headers=None):
        self.fails = dict(fails)
        self.status = status
        self.headers = headers or {}

    def __call__(self, site, path):
        if self.fails.get(path, 0) > 0:
            self.fails[path] -= 1
            return (self.status, "text/html", f"<html><body>{self.status}</body></html>", self.headers)
        return None


def test_retries_then_success_and_dead_letters_requeued_after_a_fix(env, site, redis_client, mongo_db, tmp_path):
    flaky = Flaky({"/shop/page/2/": 2, "/shop/page/3/": 10**9})
    shop = site(shop_pages(24, 8), handler=flaky)
    redis_client.lpush("scrapeme:start_urls", f"{shop.url}/shop/", f"{shop.url}/shop/page/99/")
    (worker,) = run_workers("scrapeme", env, tmp_path, 1, **FAST_RETRY)
    # a 404 is permanent: fetched once, not retried, counted for its domain
    assert Counter(shop.fetched("/shop"))["/shop/page/99/"] == 1
    assert redis_client.hget("scrapeme:stats", f"permanent_failures:{domain_of(shop.url)}") == b"1"

    fetched = Counter(shop.fetched("/shop"))
    assert fetched["/shop/page/2/"] == 3, "failed twice, then succeeded"
    assert fetched["/shop/page/3/"] == 3, "3 attempts, then the DLQ"
    assert int(redis_client.hget("scrapeme:stats", "retries")) == 4
    assert "'retry/count': 4" in worker.log()
    ids = {d["id"] for d in mongo_db.products.find()}
    assert ids == {str(700 + i) for i in range(16)}, "page 2's products are stored, page 3's are not"

    (letter,) = [json.loads(r) for r in redis_client.lrange("scrapeme:dlq", 0, -1)]
    assert letter["url"] == f"{shop.url}/shop/page/3/" and letter["status"] == 500 and letter["attempts"] == 3
    assert letter["spider"] == "scrapeme" and letter["worker"] and letter["first_attempt"] < letter["last_attempt"]
    assert "Gave up on" in worker.log() and "scrapeme:dlq" in worker.log()
    listed = cli(env, "dlq", "list", "scrapeme").stdout
    assert f"0  {shop.url}/shop/page/3/  attempts=3  HTTP 500" in listed
    assert json.loads(cli(env, "dlq", "show", "scrapeme", "0").stdout)["request"]["url"] == letter["url"]
    assert redis_client.zcard("scrapeme:inflight") == 0

    flaky.fails.clear()  # the site is fixed
    requeued = cli(env, "dlq", "requeue", "scrapeme", "0")
    assert requeued.returncode == 0 and "1 request(s) back" in requeued.stdout
    run_workers("scrapeme", env, tmp_path, 1, **FAST_RETRY)
    assert mongo_db.products.count_documents({}) == 24
    assert redis_client.llen("scrapeme:dlq") == 0
    refused = cli(env, "dlq", "purge", "scrapeme")  # no --yes and no answer: nothing deleted
    assert refused.returncode != 0


def test_429_retry_after_is_honoured(env, site, redis_client, mongo_db, tmp_path):
    shop = site(shop_pages(16, 8), handler=Flaky({"/shop/page/2/": 1}, status=429, headers={"Retry-After": "2"}))
    redis_client.lpush("scrapeme:start_urls", f"{shop.url}/shop/")
    run_workers("scrapeme", env, tmp_path, 1, RETRY_BACKOFF_BASE=0.1)
    hits = [h for h in shop.hits if h.path == "/shop/page/2/"]
    assert [h.status for h in hits] == [429, 200]
    assert hits[1].at - hits[0].at >= 2.0, f"retried after {hits[1].at - hits[0].at:.2f}s"
    assert mongo_db.products.count_documents({}) == 16


def test_budget_of_50_pages_across_3_workers(env, site, redis_client, mongo_db, tmp_path):
    pages = shop_pages(120 * 4, 4, window=5)  # 120 pages
    shop = site(pages, delay=0.05)
    assert "budget of scrapeme: 50" in cli(env, "budget", "scrapeme", "50").stdout
    redis_client.lpush("scrapeme:start_urls", f"{shop.url}/shop/")
    workers = run_workers("scrapeme", env, tmp_path, 3, CONCURRENT_REQUESTS=4)

    fetched = shop.fetched("/shop")
    assert len(fetched) == 50, f"{len(fetched)} pages fetched"
    assert len(set(fetched)) == 50
    assert {r["reason"] for r in worker_records(redis_client, "scrapeme")} == {"budget_exhausted"}
    left = queued(redis_client, "scrapeme")
    assert left > 0 and redis_client.zcard("scrapeme:inflight") == 0
    assert any(f"left in the frontier: {left} queued" in w.log() for w in workers)
    assert f"50 requests taken; {left} queued" in cli(env, "budget", "scrapeme").stdout


BROKEN_SPIDER = """
from crawlhub.items import Page
from crawlhub.spider import CrawlhubSpider


class BrokenSpider(CrawlhubSpider):
    name = "broken"

    def parse(self, response):
        yield Page(url=response.url, status=response.status, source_url=response.url)
        if "boom" in response.url:
            raise ValueError("the selector no longer matches")
        yield from self.follow_links(response, response.css("a::attr(href)").getall())
"""


def test_callback_error_sends_the_page_to_the_dlq(env, site, redis_client, mongo_db, tmp_path):
    project = tmp_path / "project"
    (project / "spiders").mkdir(parents=True)
    shutil.copy(ROOT / "scrapy.cfg", project)
    (project / "spiders" / "__init__.py").write_text("")
    (project / "spiders" / "broken.py").write_text(BROKEN_SPIDER)
    pages = dict.fromkeys(("/a", "/boom", "/b"), '<html><body><a href="/boom">x</a> <a href="/b">y</a></body></html>')
    web = site(pages)
    redis_client.lpush("broken:start_urls", f"{web.url}/a")
    worker = start_worker("broken", dict(env, PYTHONPATH=str(ROOT)), tmp_path, "broken", cwd=project)
    wait_all([worker], 60)

    (letter,) = [json.loads(r) for r in redis_client.lrange("broken:dlq", 0, -1)]
    assert letter["url"] == f"{web.url}/boom"
    assert letter["error"] == "callback error: ValueError: the selector no longer matches"
    assert letter["attempts"] == 1, "a callback error is not retried: the spider needs fixing"
    assert sorted(d["url"] for d in mongo_db.pages.find()) == [f"{web.url}/{p}" for p in ("a", "b", "boom")]
    assert redis_client.zcard("broken:inflight") == 0
