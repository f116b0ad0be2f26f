"""Scenarios that cross the features (issue #26): every pair of values across the dimensions below, on real
workers, a real Redis and the real MongoDB-wire server, a local https shop with a redirect, a robots.txt
and a hostile page (a listing page that answers 403 until it is fixed).

Each scenario asserts the same invariants at its end: every product stored exactly once, every page
stored or in the DLQ with a reason (the 403 page, unless its letter was requeued after the fix), nothing
leased, queued or in flight, and no traceback in a worker's log.

The pairs are generated with allpairspy (the table is printed by `python -m tests.test_scenarios`).
Not yet crossed here (docs/frontier.md says so): the 3-master Redis Cluster layout (its own suite,
tests/test_redis_cluster.py), the revisiting spider, `recrawl`, the budget and Redis restarted from AOF.
"""

from __future__ import annotations

import json
import signal
from collections import Counter
from datetime import datetime, timezone

import pytest
from allpairspy import AllPairs

from tests.harness import cli, start_worker, wait_all, wait_for
from tests.sites.shop import shop_pages

DIMENSIONS = {
    "layout": ["one", "partitioned"],
    "filter": ["exact", "bloom"],
    "operation": ["reset", "pause", "requeue"],
    "fault": ["none", "sigkill"],
}
SCENARIOS = [dict(zip(DIMENSIONS, values, strict=True)) for values in AllPairs(list(DIMENSIONS.values()))]
PRODUCTS, PER_PAGE = 96, 4  # 24 listing pages
FORBIDDEN = "/shop/page/7/"  # answers 403 until fixed (then its 4 products are stored)


def scenario_id(s: dict) -> str:
    return "-".join(s.values())


@pytest.mark.parametrize("scenario", SCENARIOS, ids=scenario_id)
def test_scenario(scenario, env, site, redis_client, mongo_db, tmp_path):
    pages = shop_pages(PRODUCTS, PER_PAGE)
    pages["/robots.txt"] = "User-agent: *\nDisallow: /private/\n"
    pages["/start"] = (301, "text/html", "", {"Location": "/shop/"})  # the seed redirects
    fixed = {"yes": False}

    def hostile(web, path):
        if path == FORBIDDEN and not fixed["yes"]:
            return 403, "text/html", "<html><body>forbidden</body></html>", {}
        return None

    shop = site(pages, tls=True, delay=0.03, handler=hostile)
    env = dict(env, DUPEFILTER_MODE=scenario["filter"], FRONTIER_PARTITIONS="3" if scenario["layout"] != "one" else "1",
               LEASE_TTL="3", LEASE_RECLAIM_INTERVAL="1", MAX_IDLE_TIME_BEFORE_CLOSE="0", RETRY_TIMES="0")
    workers = [start_worker("scrapeme", env, tmp_path, f"w{i}") for i in range(2)]
    redis_client.lpush("scrapeme:start_urls", f"{shop.url}/start")
    assert wait_for(lambda: mongo_db.products.count_documents({}) >= 20, 60)

    if scenario["fault"] == "sigkill":  # a worker dies mid-crawl; a new one joins
        workers[0].proc.send_signal(signal.SIGKILL)
        workers[0].proc.wait()
        workers.append(start_worker("scrapeme", env, tmp_path, "w2"))

    operation = scenario["operation"]
    since = datetime.now(timezone.utc)
    if operation == "reset":
        assert cli(env, "reset", "scrapeme", "--yes").returncode == 0
        redis_client.lpush("scrapeme:start_urls", f"{shop.url}/start")
    elif operation == "pause":
        assert cli(env, "pause", "scrapeme").returncode == 0
        assert wait_for(lambda: _inflight(redis_client, scenario) == 0, 20)
        paused_at = len(shop.hits)
        # the promise is "nothing fetched while paused": a second of it is watched (a fetch ends the wait at once)
        assert not wait_for(lambda: len(shop.hits) > paused_at, 1.0), "fetched while paused"
        assert cli(env, "resume", "scrapeme").returncode == 0

    def letters():
        return [json.loads(r) for r in dlq_entries(redis_client, scenario)]

    # the crawl ends: all stored but the forbidden page's 4 products, which are in the DLQ with the reason
    expected = PRODUCTS - PER_PAGE
    assert wait_for(lambda: mongo_db.products.count_documents({}) == expected and letters(), 90), (
        mongo_db.products.count_documents({}), letters())
    (letter,) = letters()
    assert letter["url"] == f"{shop.url}{FORBIDDEN}" and letter["status"] == 403 and letter["error"], letter
    if operation == "requeue":  # the site is fixed and the letter requeued: its products come
        fixed["yes"] = True
        assert cli(env, "dlq", "requeue", "scrapeme", "--all").returncode == 0
        expected = PRODUCTS
    if operation == "reset":  # every product was stored again after the reset, by the same workers
        assert wait_for(lambda: mongo_db.products.count_documents({"last_seen": {"$gte": since}}) == expected, 90), (
            mongo_db.products.count_documents({"last_seen": {"$gte": since}}))

    assert wait_for(lambda: mongo_db.products.count_documents({}) == expected and _idle(redis_client, scenario), 90)
    ids = Counter(d["id"] for d in mongo_db.products.find({}, {"id": 1}))
    assert len(ids) == expected and max(ids.values()) == 1, "every product stored exactly once"
    # what status says equals the store and the DLQ (the counters reach Redis every CLUSTER_STATS_INTERVAL)
    assert wait_for(lambda: _status_matches(env, mongo_db, redis_client, scenario), 15), _status_figures(
        env, mongo_db, redis_client, scenario)
    alive = [w for w in workers if w.proc.poll() is None]
    for worker in alive:
        worker.proc.send_signal(signal.SIGTERM)
    wait_all(alive, 60)
    assert not any("Traceback" in w.log() for w in alive), [w.name for w in alive if "Traceback" in w.log()]


def _status(env) -> dict:
    return json.loads(cli(env, "status", "scrapeme", "--json").stdout)



def _status_figures(env, mongo_db, redis_client, scenario) -> dict:
    """`crawlhub status --json` beside MongoDB and Redis: this crawl's items, the spider's documents stored since
    the epoch began, all its documents; the DLQ; what is left."""
    status = _status(env)
    since = datetime.fromtimestamp(status["epoch"]["at"], timezone.utc)
    return {"items": status["totals"]["items"],
            "stored_in_epoch": sum(mongo_db[name].count_documents({"spiders": "scrapeme", "last_seen": {"$gte": since}})
                                   for name in status["items"]["stored"]),
            "stored": sum(status["items"]["stored"].values()),
            "dlq": status["dlq"], "letters": len(dlq_entries(redis_client, scenario)),
            "left": status["queued"] + status["inflight"] + status["delayed"]}


def _status_matches(env, mongo_db, redis_client, scenario) -> bool:
    """Status equals the store (every document of the spider was stored in this epoch: a reset re-crawls all)."""
    f = _status_figures(env, mongo_db, redis_client, scenario)
    return f["items"] == f["stored_in_epoch"] == f["stored"] and f["dlq"] == f["letters"] and f["left"] == 0


def _parts(scenario) -> list[str]:
    """The key prefixes of the frontier's partitions."""
    return ["scrapeme"] if scenario["layout"] == "one" else [f"{{scrapeme:{p}}}" for p in range(3)]


def _inflight(redis_client, scenario) -> int:
    return sum(redis_client.zcard(f"{part}:inflight") for part in _parts(scenario))


def dlq_entries(redis_client, scenario) -> list[bytes]:
    return [r for part in _parts(scenario) for r in redis_client.lrange(f"{part}:dlq", 0, -1)]


def _idle(redis_client, scenario) -> bool:
    """Nothing in flight, waiting to retry or queued, in any partition."""
    return _inflight(redis_client, scenario) == 0 and all(
        redis_client.zcard(f"{part}:delayed") == 0 and not any(int(n) for n in redis_client.hvals(f"{part}:queued"))
        for part in _parts(scenario))


if __name__ == "__main__":
    for s in SCENARIOS:
        print(scenario_id(s))
