"""Scenarios that cross the features (issue #26): every pair of values across the dimensions below, on real
workers, a real Redis (one server of its own, or a 3-master Redis Cluster) and the real MongoDB-wire server,
a local https shop with a redirect (the seed), a robots.txt and a hostile page (a listing page that answers
403 until it is fixed). The site may change mid-crawl (``site``: ``moved``): a listing page moves to a new address,
its old one answering a 301 there, and every link to it is rewritten, as a new theme's URL scheme does.

Each scenario asserts the same invariants at its end: every product stored exactly once and none marked gone (the
shop removes none), every page stored or
in the DLQ with a reason (the 403 page, unless its letter was requeued after the fix), nothing leased or in
flight, `crawlhub status --json` equal to what MongoDB and Redis hold, the frontier never reported lost, no
traceback in a worker's log. A one-shot crawl ends with nothing queued; a revisiting one has fetched every
page again after the operation.

The pairs are generated with allpairspy (the table is printed by `python -m tests.test_scenarios`).
"""

from __future__ import annotations

import json
import signal
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import pytest
import redis
from allpairspy import AllPairs
from scrapy.settings import Settings

from crawlhub.frontier.keys import Keys
from crawlhub.services import EmbeddedRedis
from tests.harness import cli, start_worker, wait_all, wait_for
from tests.redis_cluster import LocalRedisCluster
from tests.sites.shop import shop_pages

DIMENSIONS = {
    "operation": ["reset", "recrawl", "pause", "requeue", "budget"],
    "fault": ["none", "sigkill", "aof"],
    "layout": ["one", "cluster"],
    "filter": ["exact", "bloom"],
    "spider": ["oneshot", "revisiting"],
    "site": ["same", "moved"],
}
SCENARIOS = [dict(zip(DIMENSIONS, values, strict=True)) for values in AllPairs(list(DIMENSIONS.values()))]
SPIDERS = {"oneshot": "scrapeme", "revisiting": "t_revisit"}  # t_revisit: the shop spider, every page every 4 s
PRODUCTS, PER_PAGE = 64, 4  # 16 listing pages
FORBIDDEN = "/shop/page/7/"  # answers 403 until fixed (then its 4 products are stored)
MOVED, MOVED_TO = "/shop/page/5/", "/catalogue/5/"  # site "moved": the page's new address from the operation on
BUDGET = 10  # "budget reached then raised": the requests the cluster may take, set under the running workers
PARTITIONS = 3  # on the cluster


def scenario_id(s: dict) -> str:
    return "-".join(s.values())


@pytest.fixture(scope="module")
def scenario_cluster(tmp_path_factory):
    with LocalRedisCluster(tmp_path_factory.mktemp("scenario-cluster"), masters=3) as c:
        yield c


@dataclass
class Frontier:
    """Where a scenario's frontier lives: the workers' environment, a client, its keys, and how to restart it."""

    env: dict
    client: Any  # redis.Redis or RedisCluster
    keys: Keys
    restart: Callable[[], None]  # stopped with SIGTERM (its AOF written), started again on its port and files

    def parts(self):
        return [self.keys.part(p) for p in range(self.keys.partitions)]

    def inflight(self) -> int:
        return sum(self.client.zcard(part.inflight) for part in self.parts())

    def letters(self) -> list[dict]:
        return [json.loads(r) for part in self.parts() for r in self.client.lrange(part.dlq, 0, -1)]

    def idle(self) -> bool:
        """Nothing in flight, waiting to retry or queued, in any partition."""
        return self.inflight() == 0 and all(
            self.client.zcard(part.delayed) == 0 and not any(int(n) for n in self.client.hvals(part.queued))
            for part in self.parts())


def make_frontier(scenario: dict, request, env: dict, tmp_path, spider: str) -> Frontier:
    if scenario["layout"] == "one":  # a server of its own: the AOF fault restarts it
        server = EmbeddedRedis(tmp_path / "redis")
        server.ensure()
        request.addfinalizer(server.stop)
        client = redis.Redis.from_url(server.url())
        request.addfinalizer(client.close)

        def restart():
            server.stop()
            server.ensure()

        env = dict(env, REDIS_URL=server.url(), FRONTIER_PARTITIONS="1")
        return Frontier(env, client, Keys.for_spider(Settings(), spider, partitions=1), restart)
    cluster = request.getfixturevalue("scenario_cluster")
    cluster.flush()
    env = dict(env, REDIS_CLUSTER_NODES=cluster.nodes, FRONTIER_PARTITIONS=str(PARTITIONS))
    env.pop("REDIS_URL")
    client = cluster.client()
    request.addfinalizer(client.close)
    return Frontier(env, client, Keys.for_spider(Settings(), spider, partitions=PARTITIONS, cluster=True),
                    cluster.restart)


@pytest.mark.timeout(360)
@pytest.mark.parametrize("scenario", SCENARIOS, ids=scenario_id)
def test_scenario(scenario, request, env, site, mongo_db, tmp_path):
    spider, operation, revisiting = SPIDERS[scenario["spider"]], scenario["operation"], scenario["spider"] != "oneshot"
    frontier = make_frontier(scenario, request, env, tmp_path, spider)
    client = frontier.client
    pages = shop_pages(PRODUCTS, PER_PAGE)
    listing = sorted(p for p in pages if p != "/shop/page/1/")  # (page 1 is /shop/)
    pages["/robots.txt"] = "User-agent: *\nDisallow: /private/\n"
    pages["/start"] = (301, "text/html", "", {"Location": "/shop/"})  # the seed redirects
    fixed = {"yes": False}

    def hostile(web, path):
        if path == FORBIDDEN and not fixed["yes"]:
            return 403, "text/html", "<html><body>forbidden</body></html>", {}
        return None

    shop = site(pages, tls=True, delay=0.03, handler=hostile)
    env = dict(frontier.env, SPIDER_MODULES="spiders,tests.sites.spiders", DUPEFILTER_MODE=scenario["filter"],
               LEASE_TTL="3", LEASE_RECLAIM_INTERVAL="1", MAX_IDLE_TIME_BEFORE_CLOSE="0", RETRY_TIMES="0",
               REFRESH_INTERVAL="0.3", CLUSTER_STATS_INTERVAL="0.5")
    workers = [start_worker(spider, env, tmp_path, f"w{i}") for i in range(2)]
    if operation == "budget":  # set under the running workers, before the seed
        assert cli(env, "budget", spider, str(BUDGET)).returncode == 0
    client.lpush(frontier.keys.seeds, f"{shop.url}/start")

    def products(**query) -> int:
        return mongo_db.products.count_documents(query)

    # the fault, mid-crawl
    assert wait_for(lambda: products() >= 16, 60), products()
    if scenario["fault"] == "sigkill":  # a worker dies mid-crawl; a new one joins
        workers[0].proc.send_signal(signal.SIGKILL)
        workers[0].proc.wait()
        workers.append(start_worker(spider, env, tmp_path, "w2"))
    elif scenario["fault"] == "aof":  # Redis stops and comes back from its AOF under the running workers
        frontier.restart()

    if scenario["site"] == "moved":  # the site changes under the crawl: a listing page moves, its links rewritten
        for path, page in list(pages.items()):
            if isinstance(page, str):
                pages[path] = page.replace(f"'{MOVED}'", f"'{MOVED_TO}'").replace(f'"{MOVED}"', f'"{MOVED_TO}"')
        pages[MOVED_TO] = pages[MOVED]
        pages[MOVED] = (301, "text/html", "", {"Location": MOVED_TO})
        listing = sorted(MOVED_TO if p == MOVED else p for p in listing)
        assert MOVED_TO in pages["/shop/page/4/"] and MOVED not in pages["/shop/page/6/"]

    # the operation
    since = datetime.now(timezone.utc)
    expected = PRODUCTS - PER_PAGE  # all but the forbidden page's 4, which are in the DLQ with the reason
    if operation == "reset":
        assert cli(env, "reset", spider, "--yes").returncode == 0
        client.lpush(frontier.keys.seeds, f"{shop.url}/start")
    elif operation == "recrawl":
        assert wait_for(lambda: products() == expected, 90), products()
        since = datetime.now(timezone.utc)
        answer = cli(env, "recrawl", spider, "--all")
        if revisiting:
            assert answer.returncode == 0 and "due now" in answer.stdout, answer.stderr
        else:  # a one-shot spider keeps no status store: said, not a silent "0 pages due"
            assert answer.returncode == 2 and "one-shot" in answer.stderr and "reset" in answer.stderr, answer
    elif operation == "pause":
        assert cli(env, "pause", spider).returncode == 0
        assert wait_for(lambda: frontier.inflight() == 0, 20)
        paused_at = len(shop.hits)
        # the promise is "nothing fetched while paused": a second of it is watched (a fetch ends the wait at once)
        assert not wait_for(lambda: len(shop.hits) > paused_at, 1.0), "fetched while paused"
        assert cli(env, "resume", spider).returncode == 0
    elif operation == "budget":  # every worker sees it used up and ends; new ones go on once it is raised
        ending = [w for w in workers if w.proc.returncode != -signal.SIGKILL]  # (the fault's victim is gone)
        wait_all(ending, 90)
        assert all("budget_exhausted" in w.log() for w in ending), [w.name for w in ending]
        state = json.loads(cli(env, "status", spider, "--json").stdout)
        # work is left: queued, or, when a worker was killed, in the leases it held (the link window is narrow: the
        # pages next to be found may be the dead worker's): a live worker reclaims them, and none is running now
        left = state["queued"] + (state["inflight"] if scenario["fault"] == "sigkill" else 0)
        assert state["budget"] == BUDGET and state["budget_used"] <= BUDGET and left > 0, \
            {k: state.get(k) for k in ("budget", "budget_used", "queued", "inflight", "delayed", "dlq", "seen")}
        assert products() < expected
        assert cli(env, "budget", spider, "--clear").returncode == 0
        workers = [start_worker(spider, env, tmp_path, f"w{i}-raised") for i in range(2)]

    # the end: all stored but the forbidden page's products, whose page is in the DLQ with the reason
    assert wait_for(lambda: products() == expected and frontier.letters(), 90), (
        products(), frontier.letters(), _frontier_state(env, spider), [w.log()[-3000:] for w in workers])
    # (one letter: a second says what it is, and the workers' lines on letters and expired leases how it came)
    assert len(frontier.letters()) == 1, (frontier.letters(), _frontier_state(env, spider), [
        (w.name, line) for w in workers for line in w.log().splitlines()
        if any(word in line.lower() for word in ("letter", "dlq", "expired", "lost", "redis"))][-60:])
    (letter,) = frontier.letters()
    assert letter["url"] == f"{shop.url}{FORBIDDEN}" and letter["status"] == 403 and letter["error"], letter
    if operation == "requeue":  # the site is fixed and the letter requeued: its products come
        fixed["yes"] = True
        assert cli(env, "dlq", "requeue", spider, "--all").returncode == 0
        expected = PRODUCTS
    if operation in ("reset", "recrawl") and (revisiting or operation == "reset"):
        # every product was stored again after the operation, by the same workers
        assert wait_for(lambda: products(last_seen={"$gte": since}) == expected, 90), products(last_seen={"$gte": since})
    if revisiting:  # a cycle after the operation: every page (the forbidden one once fixed) fetched again
        again = [p for p in listing if p != FORBIDDEN or fixed["yes"]]
        mark = since.timestamp()
        assert wait_for(lambda: {h.path for h in shop.hits if h.arrived > mark and h.status == 200} >= set(again), 60)
        assert wait_for(lambda: products() == expected, 30)
        # and each stored since the epoch began: a page fetched between `since` and the reset counts for the old
        # epoch, and is stored in the new one at its next fetch (the workers must not be stopped before it)
        assert wait_for(lambda: _status_figures(env, spider, mongo_db, frontier)["stored_in_epoch"] == expected, 60), \
            _status_figures(env, spider, mongo_db, frontier)
    else:
        assert wait_for(lambda: products() == expected and frontier.idle(), 90), (products(), frontier.idle())
    ids = Counter(d["id"] for d in mongo_db.products.find({}, {"id": 1}))
    assert len(ids) == expected and max(ids.values()) == 1, "every product stored exactly once"
    if revisiting and scenario["site"] == "moved":  # the old address, revisited since (if it was known), says where to
        def old_address():
            return mongo_db.url_status.find_one({"url": f"{shop.url}{MOVED}"})

        assert wait_for(lambda: old_address() is None or old_address().get("redirected_to"), 30), old_address()
        assert old_address() is None or old_address()["redirected_to"] == f"{shop.url}{MOVED_TO}", old_address()
    gone = [(d["id"], d.get("source_url")) for d in mongo_db.products.find({"gone_at": {"$ne": None}})]
    assert gone == [], f"products marked gone though the shop removed none: {gone}"

    alive = [w for w in workers if w.proc.poll() is None]
    for worker in alive:
        worker.proc.send_signal(signal.SIGTERM)
    wait_all(alive, 60)
    assert frontier.inflight() == 0, "nothing leased once the workers are stopped"
    # what status says equals the store and the DLQ; the frontier was never reported lost
    figures = _status_figures(env, spider, mongo_db, frontier)
    assert figures["items"] == figures["stored_in_epoch"] == figures["stored"] == expected, figures
    assert figures["dlq"] == figures["letters"] and figures["incidents"] == [], figures
    if not revisiting:
        assert figures["left"] == 0, figures
    assert not any("frontier_lost" in w.log() for w in workers)
    assert not any("Traceback" in w.log() for w in workers), [
        (w.name, w.log()[max(0, w.log().index("Traceback") - 600):][:3000]) for w in workers if "Traceback" in w.log()]
    # (89f66d6's form of the same check, kept word for word: the one above names the excerpt too)
    assert not any("Traceback" in w.log() for w in workers), [w.name for w in workers if "Traceback" in w.log()]


def _frontier_state(env, spider) -> dict:
    """What status says of the frontier, for a failure's message."""
    status = json.loads(cli(env, "status", spider, "--json").stdout)
    return {k: status.get(k) for k in ("seeds", "queued", "inflight", "delayed", "dlq", "seen", "epoch", "paused",
                                       "budget", "budget_used", "incidents", "workers_alive")}


def _status_figures(env, spider, mongo_db, frontier) -> dict:
    """`crawlhub status --json` beside MongoDB and Redis: this crawl's items, the spider's documents stored since
    the epoch began, all its documents; the DLQ; what is left; the incidents."""
    status = json.loads(cli(env, "status", spider, "--json").stdout)
    since = datetime.fromtimestamp(status["epoch"]["at"], timezone.utc)
    return {"items": status["totals"]["items"],
            "stored_in_epoch": sum(mongo_db[name].count_documents({"spiders": spider, "last_seen": {"$gte": since}})
                                   for name in status["items"]["stored"]),
            "stored": sum(status["items"]["stored"].values()),
            "dlq": status["dlq"], "letters": len(frontier.letters()),
            "left": status["queued"] + status["inflight"] + status["delayed"], "incidents": status["incidents"]}


if __name__ == "__main__":
    for s in SCENARIOS:
        print(scenario_id(s))
