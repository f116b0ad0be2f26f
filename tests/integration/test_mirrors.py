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


def star(count: int) -> dict:
    """A root page linking to ``count`` leaf pages: any number of them can be fetched at once."""
    pages = {"/": "<html><body>" + "".join(f'<a href="/p/{i}">{i}</a> ' for i in range(count)) + "</body></html>"}
    pages.update({f"/p/{i}": f"<html><head><title>page {i}</title></head></html>" for i in range(count)})
    return pages


def most_at_once(hits) -> int:
    """Most of ``hits`` being served at one moment (each from its arrival to its answer)."""
    return max((sum(1 for g in hits if g.arrived <= h.arrived < g.at) for h in hits), default=0)


def named_workers(env, tmp_path, spider: str, count: int):
    """Workers whose requests the site tells apart: User-Agent w0, w1, ... (header profiles off)."""
    return [start_worker(spider, env, tmp_path, f"w{i}", HEADER_PROFILES_ENABLED="False", USER_AGENT=f"w{i}")
            for i in range(count)]


def test_a_dead_workers_share_of_a_domain_goes_to_the_live_ones(env, site, redis_client, tmp_path):
    """DOMAIN_CONCURRENCY=4 shared by two workers: each takes its fair share, 2. One is killed: once the upkeep's
    count of live workers (every 2 s, a heartbeat older than WORKER_DEAD_AFTER is dead) and the killed worker's
    leases (their slots free when they expire, LEASE_TTL) say so, the survivor takes all 4 slots."""
    import time

    shop = site(star(300), delay=0.4)
    env = dict(env, MAX_IDLE_TIME_BEFORE_CLOSE="0", DOMAIN_CONCURRENCY="4", WORKER_HEARTBEAT_INTERVAL="0.5",
               WORKER_DEAD_AFTER="3", LEASE_TTL="3", LEASE_RECLAIM_INTERVAL="1")
    redis_client.lpush("generic:start_urls", f"{shop.url}/")
    workers = named_workers(env, tmp_path, "generic", 2)

    def pages_by(ua: str, since: float = 0.0) -> list:
        return [h for h in list(shop.hits) if h.path.startswith("/p/") and h.user_agent == ua and h.arrived > since]

    # both at work for a while (each counted the other): the domain's 4 slots are shared, 2 each
    assert wait_for(lambda: len(pages_by("w0")) >= 10 and len(pages_by("w1")) >= 10, 60)
    # from when each had counted the other (the upkeep counts every 2 s)
    shared_from = max(min(h.arrived for h in pages_by(ua)) for ua in ("w0", "w1")) + 2.5
    assert wait_for(lambda: len(pages_by("w1", shared_from)) >= 8, 30)
    assert most_at_once(pages_by("w1", shared_from)) <= 2, "two live workers: a fair share is 2 of 4 slots"
    workers[0].proc.kill()
    killed_at = time.time()
    # within WORKER_DEAD_AFTER + 2 s (and the killed worker's leases expired, LEASE_TTL): 3 or 4 at once
    def crowded() -> list:  # the survivor's requests that arrived with 2 more of its own being served
        hits = pages_by("w1", killed_at)
        return [h for h in hits if sum(1 for g in hits if g.arrived <= h.arrived < g.at) >= 3]

    taken = wait_for(crowded, 30)
    assert taken, f"the survivor still took {most_at_once(pages_by('w1', killed_at))} slots at once after its peer died"
    first = min(h.arrived for h in taken) - killed_at
    assert first <= max(3.0 + 2.0, 3.0) + 3.0, f"the survivor took the dead worker's slots {first:.1f}s after it died"
    assert shop.max_active <= 4 + 2, "never more than the domain's slots (and the killed worker's orphaned answers)"
    workers[1].proc.send_signal(signal.SIGTERM)
    wait_all(workers[1:], 60)
    assert "Traceback" not in workers[1].log()


def test_a_worker_waiting_on_a_slow_domain_takes_another_workers_links_within_the_poll_interval(env, site, redis_client,
                                                                                              tmp_path):
    """The domains' next-ready hint (Upkeep.not_before): a worker whose only queued domain is limited to 1/m
    sleeps on it, capped at FRONTIER_POLL_INTERVAL, so the links another worker queues for another domain reach
    it within that interval, not when the slow domain is next ready (a minute on). A seed pushed meanwhile is
    read as soon."""
    import time

    from crawlhub._utils.urls import domain_of

    slow, fast = site(star(10)), site(star(60), delay=1.0)
    # (robots.txt off: its fetch would take the slow domain's one request of the minute)
    env = dict(env, MAX_IDLE_TIME_BEFORE_CLOSE="0", FRONTIER_POLL_INTERVAL="2", CONCURRENT_REQUESTS="4",
               ROBOTSTXT_OBEY="False")
    assert cli(env, "limits", "set", domain_of(slow.url), "1/m").returncode == 0
    redis_client.lpush("generic:start_urls", f"{slow.url}/")
    workers = named_workers(env, tmp_path, "generic", 2)
    # both workers open, the slow site's root fetched, its 10 links queued (next ready in a minute)
    assert wait_for(lambda: all("Reading seeds from Redis key" in w.log() for w in workers)
                    and "/" in slow.fetched("/") and redis_client.llen("generic:start_urls") == 0, 60)
    pushed_at = time.time()
    redis_client.lpush("generic:start_urls", f"{fast.url}/")
    assert wait_for(lambda: fast.fetched("/") and fast.fetched("/p/"), 30)
    (root,) = [h for h in fast.hits if h.path == "/"]
    # the seed too: read while the queued domain waits (the worker is idle for Scrapy, not busy with a minute's wait)
    assert root.arrived - pushed_at <= 2 + 1.5, f"the seed was read {root.arrived - pushed_at:.1f}s after it was pushed"
    other = {"w0": "w1", "w1": "w0"}[root.user_agent]  # it learns of the fast site's links only through the frontier
    joined = wait_for(lambda: [h.arrived for h in list(fast.hits) if h.user_agent == other], 20)
    assert joined, f"{other} never took the fast site's links (it slept on the slow domain's hint)"
    late = min(joined) - root.at
    # the interval, and a second for a loaded machine; without the cap the wait was the slow domain's minute
    assert late <= 2 + 1.5, f"{other} took the fast site's links {late:.1f}s after they were queued"
    assert len(slow.fetched("/p/")) <= 1, "the 1/m limit held"
    stop(workers)
    assert "Traceback" not in "".join(w.log() for w in workers)


def test_a_proxy_reset_reaches_the_running_workers_within_proxy_state_refresh(env, site, redis_client, tmp_path):
    """A proxy cooled down on a domain for 10 minutes; the site stops blocking it and `crawlhub proxies reset`
    runs under two running workers: within PROXY_STATE_REFRESH every worker's copy forgets the cool-down."""
    import time

    from crawlhub._utils.urls import domain_of
    from crawlhub.proxies import cool_key
    from tests.sites.server import LocalProxy

    blocking = {"pa": True}

    def block_pa(shop, path):  # the site sees the proxies' Via
        if blocking["pa"] and shop.request_header("Via").startswith("1.1 pa"):
            return (403, "text/html", "<h1>Access denied</h1>", {})
        return None

    shop = site(star(400), handler=block_pa)
    pa, pb = LocalProxy("pa", "ok", "").start(), LocalProxy("pb", "ok", "").start()
    try:
        env = dict(env, MAX_IDLE_TIME_BEFORE_CLOSE="0", DOMAIN_RATE="8/s", PROXY_BAN_AFTER="1", PROXY_COOLDOWN="600",
                   PROXY_STATE_REFRESH="1", PROXY_POOLS=json.dumps({"dc": [pa.url(), pb.url()]}))
        redis_client.lpush("generic:start_urls", f"{shop.url}/")
        workers = [start_worker("generic", env, tmp_path, f"w{i}") for i in range(2)]
        via = lambda h: dict(h.headers).get("Via", "")  # noqa: E731
        assert wait_for(lambda: any(k.startswith(b"dc/127.0.0.1:%d" % pa.port)
                                    for k in redis_client.hkeys(cool_key(domain_of(shop.url)))), 60)
        cooled_at = time.time()
        # cooled for the cluster: after the requests already on their way, nothing through pa
        assert wait_for(lambda: sum(1 for h in list(shop.hits) if h.arrived > cooled_at + 1.5) >= 10, 30)
        reset_at = time.time()
        assert not [h for h in shop.hits if cooled_at + 1.5 < h.arrived < reset_at and via(h).startswith("1.1 pa")]
        blocking["pa"] = False
        assert "proxy state reset" in cli(env, "proxies", "reset").stdout
        # measured from the reset, not from before the command's own start (a Python process that imports Scrapy:
        # up to seconds on a loaded machine, and no part of the promise)
        reset_at = time.time()
        back = wait_for(lambda: [h.arrived for h in list(shop.hits)
                                 if h.arrived > reset_at and h.status == 200 and via(h) == "1.1 pa"], 20)
        assert back, "the workers kept the cool-down after `crawlhub proxies reset`"
        assert min(back) - reset_at <= 1 + 2, f"pa used again {min(back) - reset_at:.1f}s after the reset"
        stop(workers)
        assert "Traceback" not in "".join(w.log() for w in workers)
    finally:
        pa.stop()
        pb.stop()
