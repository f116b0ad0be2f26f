"""Every worker-local copy of shared state follows the original (issue #26; docs/frontier.md, "Mirrors").

Each test changes the original while real workers run and shows the copy following within its stated
staleness: a reset reaches the workers' local link filters; a frontier that vanishes (Redis restarted
empty) is said loudly and not called a finished crawl."""

from __future__ import annotations

import json
import signal

import pytest

from tests.harness import cli, start_worker, wait_all, wait_for
from tests.sites.shop import shop_pages


def last_seen(mongo_db) -> dict:
    return {d["_id"]: d["last_seen"] for d in mongo_db.products.find({}, {"last_seen": 1})}


def stop(workers) -> None:
    for worker in workers:
        worker.proc.send_signal(signal.SIGTERM)
    wait_all(workers, 60)


@pytest.mark.parametrize("mode", ["exact", "bloom"])
def test_a_reset_and_reseed_with_the_same_long_running_workers_refreshes_every_item(mode, env, site, redis_client,
                                                                                     mongo_db, tmp_path):
    shop = site(shop_pages(120, 8), tls=True)  # 15 listing pages, 120 products
    env = dict(env, MAX_IDLE_TIME_BEFORE_CLOSE="0", DUPEFILTER_MODE=mode)  # 0: the workers never idle out
    workers = [start_worker("scrapeme", env, tmp_path, f"w{i}") for i in range(2)]
    redis_client.lpush("scrapeme:start_urls", f"{shop.url}/shop/")
    assert wait_for(lambda: mongo_db.products.count_documents({}) == 120, 60), mongo_db.products.count_documents({})
    assert wait_for(lambda: redis_client.zcard("scrapeme:inflight") == 0 and not redis_client.llen("scrapeme:start_urls"), 30)
    before = last_seen(mongo_db)

    reset = cli(env, "reset", "scrapeme", "--yes")
    assert reset.returncode == 0, reset.stderr
    redis_client.lpush("scrapeme:start_urls", f"{shop.url}/shop/")
    # every item of the shop is fetched again by the same workers (their local filters knew every link)
    refreshed = wait_for(lambda: sum(last_seen(mongo_db)[k] > v for k, v in before.items()) == 120, 60)
    after = last_seen(mongo_db)
    assert refreshed, f"{sum(after[k] > v for k, v in before.items())} of 120 items refreshed after the reset"
    assert all(w.proc.poll() is None for w in workers), "the workers are the same, still running"
    assert any("was replaced (reset" in w.log() for w in workers)
    stop(workers)
    assert "Traceback" not in "".join(w.log() for w in workers)


def test_redis_restarted_empty_is_loud_and_not_a_finished_crawl(env, site, redis_client, mongo_db, tmp_path):
    shop = site(shop_pages(200, 4), delay=0.05)  # 50 listing pages, slow enough to be mid-crawl
    env = dict(env, MAX_IDLE_TIME_BEFORE_CLOSE="0")
    workers = [start_worker("scrapeme", env, tmp_path, f"w{i}") for i in range(2)]
    redis_client.lpush("scrapeme:start_urls", f"{shop.url}/shop/")
    assert wait_for(lambda: mongo_db.products.count_documents({}) >= 20, 60)
    # both workers know the frontier's epoch (a worker that opens after the flush joins what it finds then: a
    # new frontier, nothing vanished from its point of view; on a loaded machine the second one opens late)
    assert wait_for(lambda: all("Reading seeds from Redis key" in w.log() for w in workers), 60)
    redis_client.flushdb()  # what a Redis restarted without its data looks like to the workers

    wait_all(workers, 60)  # they stop by themselves
    logs = [w.log() for w in workers]
    assert all("Spider closed (frontier_lost)" in log for log in logs), "neither finished nor idle: frontier_lost"
    assert all("vanished from Redis" in log for log in logs)
    assert not any("Spider closed (finished)" in log for log in logs)
    (incident, *_) = [json.loads(r) for r in redis_client.lrange("scrapeme:incidents", 0, -1)]
    assert incident["what"] == "frontier vanished"
    status = json.loads(cli(env, "status", "scrapeme", "--json").stdout)
    assert status["incidents"] and status["incidents"][0]["what"] == "frontier vanished"
    assert "frontier vanished" in cli(env, "status", "scrapeme").stdout


def long_crawl(env, site, redis_client, tmp_path, pages: dict, workers: int = 2, **site_kwargs):
    """Long-running workers (they never idle out) crawling ``pages``; returns the site and the workers."""
    shop = site(pages, **site_kwargs)
    env = dict(env, MAX_IDLE_TIME_BEFORE_CLOSE="0")
    redis_client.lpush("scrapeme:start_urls", f"{shop.url}/shop/")
    return shop, [start_worker("scrapeme", env, tmp_path, f"w{i}") for i in range(workers)]


def busiest_second(times: list[float]) -> int:
    return max((sum(1 for u in times if t <= u < t + 1.0) for t in times), default=0)


def test_a_run_time_limit_set_and_cleared_reaches_the_running_workers(env, site, redis_client, tmp_path):
    """`crawlhub limits` while two workers crawl at full speed: within FRONTIER_POLL_INTERVAL (and the requests
    a worker had leased already, a second in all) no more than the new rate; cleared, full speed again."""
    from crawlhub._utils.urls import domain_of

    pages = shop_pages(120 * 4, 4)
    shop, workers = long_crawl(env, site, redis_client, tmp_path, pages, delay=0.02)
    domain = domain_of(shop.url)
    assert wait_for(lambda: len(shop.fetched("/shop")) >= 10, 60)
    assert "rate 2/s" in cli(env, "limits", "set", domain, "2/s").stdout
    limited_from = __import__("time").time() + 1.0
    assert wait_for(lambda: len([h for h in shop.hits if h.arrived > limited_from]) >= 8, 30)
    limited = sorted(h.arrived for h in shop.hits if h.arrived > limited_from)
    assert busiest_second(limited) <= 3, f"{busiest_second(limited)} requests in a second under a 2/s limit"
    assert "run-time limit removed" in cli(env, "limits", "clear", domain).stdout
    cleared_at = __import__("time").time()
    # 5 requests within one second, which the 2/s limit never allows (3 at most, as above): the workers saw it go
    # (watched for 10 s: how fast a loaded machine then goes is not the question)
    assert wait_for(lambda: busiest_second(sorted(h.arrived for h in shop.hits if h.arrived > cleared_at)) >= 5, 10), \
        "the limit stayed"
    assert wait_for(lambda: set(shop.fetched("/shop")) == set(pages), 60)
    stop(workers)


def test_a_changed_robots_txt_reaches_the_running_workers_within_its_ttl(env, site, redis_client, mongo_db, tmp_path):
    """robots.txt changes while workers crawl: once the shared record expires (ROBOTSTXT_TTL) the next worker
    to need it fetches it again, and every worker's parsed copy follows; the disallowed pages end (dropped,
    with the reason logged), not lost and not fetched."""
    import time

    pages = shop_pages(120 * 4, 4)
    pages["/robots.txt"] = "User-agent: *\nDisallow: /private/\n"
    shop, workers = long_crawl(dict(env, ROBOTSTXT_TTL="2"), site, redis_client, tmp_path, pages, delay=0.05)
    assert wait_for(lambda: len(shop.fetched("/shop")) >= 10, 60)
    pages["/robots.txt"] = "User-agent: *\nDisallow: /shop/page/\n"
    changed_at = time.time()
    # within the TTL, the in-flight pages and one more robots.txt fetch: no listing page after that
    assert wait_for(lambda: any(h.path == "/robots.txt" and h.arrived > changed_at for h in shop.hits), 10)
    assert wait_for(lambda: redis_client.zcard("scrapeme:inflight") == 0
                    and not any(int(n) for n in redis_client.hvals("scrapeme:queued")), 30), "the crawl ended"
    late = [h.path for h in shop.hits if h.path.startswith("/shop/page/") and h.arrived > changed_at + 2 + 1.5]
    assert late == [], f"fetched though robots.txt disallows them: {late[:5]}"
    assert len(shop.fetched("/shop/page/")) < len(pages) - 2, "the change came before the end of the crawl"
    stop(workers)
    logs = "".join(w.log() for w in workers)
    assert "'robotstxt/forbidden'" in logs and "Traceback" not in logs  # (counted; each dropped at DEBUG, as Scrapy does)


def test_lua_scripts_flushed_from_redis_are_loaded_again_by_the_running_workers(env, site, redis_client, mongo_db,
                                                                                tmp_path):
    """SCRIPT FLUSH (what a Redis restart or a failover to a replica does to the scripts' SHAs) mid-crawl: the next
    call of each script answers NOSCRIPT, the worker loads it and calls again; nothing is lost or fetched twice."""
    from collections import Counter

    pages = shop_pages(40 * 4, 4)
    shop, workers = long_crawl(env, site, redis_client, tmp_path, pages, delay=0.03)
    assert wait_for(lambda: len(shop.fetched("/shop")) >= 10, 60)
    redis_client.script_flush()
    assert wait_for(lambda: mongo_db.products.count_documents({}) == len(pages) * 4
                    and redis_client.zcard("scrapeme:inflight") == 0, 60), mongo_db.products.count_documents({})
    fetched = Counter(shop.fetched("/shop"))
    assert set(fetched) == set(pages) and max(fetched.values()) == 1, {p: n for p, n in fetched.items() if n > 1}
    stop(workers)
    assert not any("Traceback" in w.log() or " ERROR: " in w.log() for w in workers)
