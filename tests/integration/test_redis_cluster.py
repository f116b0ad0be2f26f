"""Integration (#17): real `scrapy crawl` workers on a real local Redis Cluster (3 masters on loopback
ports, started and stopped here), a partitioned frontier, several local sites (several domains, so
several partitions). The sites' own access logs and MongoDB are the judges."""

from __future__ import annotations

import hashlib
import json
import os
import socket
import time
from collections import Counter
from pathlib import Path

import pytest
from scrapy.settings import Settings

from crawlhub._utils.urls import domain_of
from crawlhub.frontier.keys import GROUPED, Keys
from crawlhub.services import EmbeddedRedis
from tests.harness import cli, http, start_ui, start_worker, wait_all, wait_for, worker_records
from tests.redis_cluster import LocalRedisCluster
from tests.sites.shop import shop_pages

SHOPS, PAGES, PER_PAGE = 4, 24, 4  # 4 shops of 24 listing pages (96 products each)
PARTITIONS = 8
LEASES = {"LEASE_TTL": 3, "LEASE_RECLAIM_INTERVAL": 1, "MAX_IDLE_TIME_BEFORE_CLOSE": 3}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with LocalRedisCluster(tmp_path_factory.mktemp("cluster"), masters=3) as c:
        yield c


@pytest.fixture
def cluster_env(env, cluster):
    cluster.flush()
    env = dict(env)
    env.pop("REDIS_URL")
    env.update(REDIS_CLUSTER_NODES=cluster.nodes, FRONTIER_PARTITIONS=str(PARTITIONS))
    return env


def start_shops(site, delay=0.05, **kwargs) -> list:
    """SHOPS shops on free ports whose domains (127.0.0.1:port) fall in two partitions at least: on random ports
    all may share one (1 in 64), and a test of a partitioned crawl would then prove less."""
    while True:
        shops = [site(shop_pages(PAGES * PER_PAGE, PER_PAGE, first_id=1000 * (i + 1), **kwargs), delay=delay)
                 for i in range(SHOPS)]
        if len(partitions_used(shops)) >= 2:
            return shops
        for shop in shops:
            shop.stop()


def seed(client, shops) -> None:
    for shop in shops:
        client.lpush("scrapeme:start_urls", f"{shop.url}/shop/")


def assert_each_page_once(shops, mongo_db, allow_refetch: bool = False) -> Counter:
    refetched: Counter = Counter()
    for shop in shops:
        fetched = Counter(shop.fetched("/shop"))
        assert set(fetched) == set(shop.pages), f"{shop.url}: never fetched {sorted(set(shop.pages) - set(fetched))[:5]}"
        twice = {p: n for p, n in fetched.items() if n > 1}
        if not allow_refetch:
            assert not twice, f"{shop.url}: fetched twice {twice}"
        refetched.update(twice)
    docs = list(mongo_db.products.find({}, {"id": 1}))
    ids = Counter(d["id"] for d in docs)
    assert len(ids) == SHOPS * PAGES * PER_PAGE, f"{len(ids)} products stored, expected {SHOPS * PAGES * PER_PAGE}"
    assert max(ids.values()) == 1, f"stored twice: {[k for k, v in ids.items() if v > 1][:5]}"
    return refetched


LAYOUT = Keys.for_spider(Settings(), "scrapeme", partitions=PARTITIONS, cluster=True)


def partitions_used(shops) -> set[int]:
    return {LAYOUT.partition_of(domain_of(s.url)) for s in shops}


def busiest_second(times: list[float]) -> int:
    return max((sum(1 for u in times if t <= u < t + 1.0) for t in times), default=0)


def test_three_workers_on_a_three_master_cluster_fetch_each_page_once(cluster_env, cluster, site, mongo_db, tmp_path):
    shops = start_shops(site)
    client = cluster.client()
    seed(client, shops)
    env = {**cluster_env, "DOMAIN_RATE": "8"}  # per domain, for the whole cluster
    workers = [start_worker("scrapeme", env, tmp_path, f"w{i}", CONCURRENT_REQUESTS=4) for i in range(3)]
    wait_all(workers, 180)

    assert_each_page_once(shops, mongo_db)
    for shop in shops:
        times = sorted(h.arrived for h in shop.hits)
        assert busiest_second(times) <= 9, f"{shop.url}: {busiest_second(times)} requests in one second at 8/s"
    used = partitions_used(shops)
    assert len(used) >= 2, f"the shops' domains all fell in one partition ({used}): the test proves less"
    # every partition's keys carry its hash tag, and the crawl's keys spread over the masters
    keys = [k.decode() for k in client.scan_iter("*", count=1000)]
    # (#30: the keys every round reads are grouped under partition 0's tag, whether a shop uses it or not)
    grouped = {getattr(LAYOUT, name) for name in GROUPED}
    assert all(name.startswith(LAYOUT.tag(0) + ":") for name in grouped) and LAYOUT.epoch in keys
    tagged = [k for k in keys if k.startswith("{scrapeme:") and k not in grouped]
    assert tagged and all(k.startswith(tuple(LAYOUT.tag(p) + ":" for p in used)) for k in tagged), tagged[:5]
    records = worker_records(client, "scrapeme")
    assert len(records) == 3 and all(r["state"] == "finished" for r in records)
    assert sum(1 for r in records if r["pages"] > 0) >= 2, f"work was not shared: {records}"
    status = json.loads(cli(env, "status", "scrapeme", "--json").stdout)
    assert status["partitions"] == PARTITIONS and status["queued"] == 0 and status["inflight"] == 0
    assert status["seen"] == sum(len(set(s.pages)) for s in shops)
    for worker in workers:
        assert "Traceback" not in worker.log(), worker.log()[-3000:]
        assert "Shared frontier on Redis Cluster redis://" in worker.log() and "redis-cli -c " in worker.log()
    # a cluster worker starts no embedded Redis of its own (one did, only to print where the frontier was)
    assert not EmbeddedRedis(Path(env["CRAWLHUB_HOME"])).running()


def test_one_partition_on_a_cluster_is_one_masters_and_one_script_call_a_round(cluster_env, cluster, site, mongo_db,
                                                                                   tmp_path):
    """FRONTIER_PARTITIONS=1 on a Redis Cluster (#30): the partition's keys and the keys a round reads (epoch, pause,
    budget) share one hash tag, so the whole frontier is one master's and a round is one script call, as on one
    redis-server; pause and a budget set with the crawlhub command hold, and every page is stored once."""
    shops = start_shops(site)
    client = cluster.client()
    for port in cluster.primaries():
        redis_client_of(port).config_resetstat()
        redis_client_of(port).script_flush()  # (the module's earlier tests loaded the scripts: this one's workers load)
    env = {**cluster_env, "FRONTIER_PARTITIONS": "1"}
    one = Keys.for_spider(Settings(), "scrapeme", partitions=1, cluster=True)
    assert one.one_call and one.part(0).paused == one.paused == "{scrapeme:0}:paused"
    assert cli(env, "pause", "scrapeme").returncode == 0
    total = sum(len(s.pages) for s in shops)
    assert cli(env, "budget", "scrapeme", str(total)).returncode == 0
    seed(client, shops)
    workers = [start_worker("scrapeme", env, tmp_path, f"w{i}", CONCURRENT_REQUESTS=4) for i in range(3)]
    assert wait_for(lambda: len(worker_records(client, "scrapeme")) == 3, 60)
    assert not wait_for(lambda: sum(len(s.fetched("/shop")) for s in shops) > len(shops), 3.0), \
        "a paused crawl leased pages (seeds are fetched once)"
    evalsha = {p: int(redis_client_of(p).info("commandstats").get("cmdstat_evalsha", {}).get("calls", 0))
               for p in cluster.primaries()}
    assert cli(env, "resume", "scrapeme").returncode == 0
    wait_all(workers, 180)
    assert_each_page_once(shops, mongo_db)
    assert client.get("scrapeme:partitions") == b"1:grouped"
    assert int(client.get(one.budget_used)) == total, "the budget counted every page, in the partition's own slot"
    node = client.get_node_from_key(one.part(0).inflight)
    frontier = [k.decode() for k in client.scan_iter("{scrapeme:*", count=1000)]
    assert frontier and all(k.startswith("{scrapeme:0}:") for k in frontier), frontier[:5]
    assert not client.exists(one.ready), "hints are for rounds over several partitions: one call a round needs none"
    calls = {p: int(redis_client_of(p).info("commandstats").get("cmdstat_evalsha", {}).get("calls", 0)) - evalsha[p]
             for p in cluster.primaries()}
    assert calls[node.port] > 0 and all(n == 0 for p, n in calls.items() if p != node.port), calls
    # a worker's components share one cluster client (one COMMAND table read, about 0.7 ms of a master's CPU: one
    # per worker, whose scheduler takes over the crawl command's checks' client, and one per crawlhub command run
    # here), and its pipelines
    # route script calls by their keys without asking the server (COMMAND GETKEYS, a round trip per call)
    stats = [redis_client_of(port).info("commandstats") for port in cluster.primaries()]
    assert not any("cmdstat_command|getkeys" in st for st in stats), [st.get("cmdstat_command|getkeys") for st in stats]
    tables = sum(int(st.get("cmdstat_command", {}).get("calls", 0)) for st in stats)
    assert tables <= 3 * 2 + 3, f"{tables} COMMAND calls for 3 workers and 3 crawlhub commands"
    # (#30) none of those reads the whole table: a cluster client reads the entries of the commands it routes (COMMAND
    # INFO), and a worker loads the tick on the partition's master only (redis-py's helper compiles it on each)
    assert tables == 0, f"{tables} whole COMMAND tables read by crawlhub's cluster clients"
    assert 0 < sum(int(st.get("cmdstat_command|info", {}).get("calls", 0)) for st in stats) <= 3 * 2 * 3 + 3 * 3
    loads = {p: int(st.get("cmdstat_script|load", {}).get("calls", 0)) for p, st in zip(cluster.primaries(), stats, strict=True)}
    assert 0 < loads[node.port] <= 3 and all(n == 0 for p, n in loads.items() if p != node.port), loads
    for worker in workers:
        assert "Traceback" not in worker.log(), worker.log()[-3000:]


def test_a_cluster_client_routes_a_command_outside_its_usual_list_by_reading_its_entry_once(cluster):
    """The cluster client's command table is read an entry at a time (#30): a command crawlhub does not usually
    send (not in ROUTED_COMMANDS), and one with a subcommand, are routed to the node of their key, each entry read
    once and the whole table never; a name Redis does not know fails as redis-py says."""
    from crawlhub.connection import ROUTED_COMMANDS, get_redis

    cluster.flush()
    for port in cluster.primaries():
        redis_client_of(port).config_resetstat()
    client = get_redis(Settings({"REDIS_CLUSTER_NODES": cluster.nodes}))
    assert "strlen" not in ROUTED_COMMANDS and "getrange" not in ROUTED_COMMANDS
    for key in ("a", "b", "c", "{x}d", "{y}e"):
        client.set(key, "value")
        assert client.strlen(key) == 5 and client.getrange(key, 0, 1) == b"va"
        assert client.memory_usage(key) > 0
        holder = client.get_node_from_key(key).port
        assert redis_client_of(holder).get(key) == b"value"
    stats = [redis_client_of(port).info("commandstats") for port in cluster.primaries()]
    assert not any("cmdstat_command" in st for st in stats), [st.get("cmdstat_command") for st in stats]
    infos = sum(int(st.get("cmdstat_command|info", {}).get("calls", 0)) for st in stats)
    assert infos == 5, f"{infos} COMMAND INFO: the usual list, strlen, getrange, 'memory usage' then memory, once each"
    # a command Redis does not know: redis-py reads the whole table once more (a newer server?), then refuses it
    with pytest.raises(Exception, match="(?i)doesn't exist"):
        client.execute_command("NOSUCHCOMMAND", "a")


def test_what_is_left_on_a_cluster_is_one_exists_a_partition_through_the_workers_client(cluster):
    """What an idle worker asks before it closes (#30): on a cluster, one EXISTS of a partition's keys (they share its
    slot) a partition, in one pipeline over the masters, where a ZCARD a key was five; it sees a request in flight
    in one partition of 8."""
    from crawlhub.connection import get_redis
    from crawlhub.frontier.partitions import Partitions, claim_layout
    from crawlhub.frontier.records import EnqueueOp

    cluster.flush()
    client = get_redis(Settings({"REDIS_CLUSTER_NODES": cluster.nodes}))
    keys = claim_layout(client, Keys.for_spider(Settings(), "left", partitions=PARTITIONS, cluster=True))
    parts = Partitions(client, keys, {"rate": 0})

    def left() -> bool:
        for port in cluster.primaries():
            redis_client_of(port).config_resetstat()
        found = parts.left()
        stats = [redis_client_of(port).info("commandstats") for port in cluster.primaries()]
        sent: Counter[str] = Counter()
        for st in stats:
            sent.update({name: int(st[name]["calls"]) for name in st if name in ("cmdstat_exists", "cmdstat_zcard")})
        assert sent == {"cmdstat_exists": PARTITIONS}, sent
        return found

    assert not left()
    payload = json.dumps({"url": "http://d0.test/"}).encode()
    assert parts.tick([EnqueueOp(hashlib.sha1(payload).hexdigest(), payload, 0, False, "", "d0.test")]).tick.added == 1
    taken = []
    assert wait_for(lambda: taken.extend(parts.tick(n=1, worker="w").tick.taken) or taken, 10)
    assert not parts.pending() and left(), "a request in flight in one partition of 8"
    parts.tick(acks=[taken[0].lease_id])
    assert not left()


def test_a_cluster_client_retries_a_failover_at_least_three_times_and_says_no_deprecated_word(cluster):
    """redis-py 6 and later retry a cluster's errors by the client's ``retry`` (its ``cluster_error_retry_attempts``
    is deprecated: passed, it only warns, in every worker's log); REDIS_RETRIES sets it, 3 at the least."""
    import warnings

    from crawlhub.connection import get_redis

    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        client = get_redis(Settings({"REDIS_CLUSTER_NODES": cluster.nodes, "REDIS_RETRIES": 1}))
        assert client.ping()
    assert client.retry.get_retries() == 3
    assert get_redis(Settings({"REDIS_CLUSTER_NODES": cluster.nodes})).retry.get_retries() == 10, "REDIS_RETRIES' default"


def redis_client_of(port: int):
    import redis

    return redis.Redis(port=port)


@pytest.mark.parametrize("recorded", ["", f"{PARTITIONS}:placed"], ids=["new", "laid-out-by-30"])
def test_the_crawlhub_command_steers_a_crawl_on_a_cluster(cluster_env, cluster, site, mongo_db, tmp_path, recorded):
    """The crawlhub command on a new frontier, and on one laid out by #30 (recorded "placed": the keys every round
    reads under their own names, "scrapeme:epoch"...), which workers and commands of today keep using."""
    shops = start_shops(site, delay=0.1)
    client = cluster.client()
    env = cluster_env
    if recorded:
        client.set("scrapeme:partitions", recorded)
    for shop in shops:
        assert cli(env, "seed", "scrapeme", f"{shop.url}/shop/").returncode == 0
    assert cli(env, "pause", "scrapeme").returncode == 0
    worker = start_worker("scrapeme", env, tmp_path, "w0", CONCURRENT_REQUESTS=4)
    # the worker asked for requests and was told the crawl is paused (it logs it once)
    assert wait_for(lambda: "is paused (" in worker.log(), 60), "the worker never saw the pause"
    assert sum(len(s.fetched("/shop")) for s in shops) <= 4, "a paused crawl leased pages (seeds are fetched once)"
    out = cli(env, "status", "scrapeme", "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["paused"] is True
    assert cli(env, "resume", "scrapeme").returncode == 0
    wait_all([worker], 180)
    assert_each_page_once(shops, mongo_db)
    shown = cli(env, "limits", "show", "--json")
    assert shown.returncode == 0, shown.stderr
    assert {domain_of(s.url) for s in shops} <= {row["domain"] for row in json.loads(shown.stdout)}
    assert cli(env, "dlq", "list", "scrapeme").returncode == 0
    shown = cli(env, "partitions", "scrapeme", "--json")
    assert shown.returncode == 0, shown.stderr
    table = json.loads(shown.stdout)
    assert table["partitions"] == PARTITIONS and len(table["rows"]) == PARTITIONS
    assert sum(r["seen"] for r in table["rows"]) == sum(len(set(s.pages)) for s in shops)
    assert {r["node"] for r in table["rows"]} <= {f"127.0.0.1:{p}" for p in cluster.primaries()}
    assert {r["partition"] for r in table["rows"] if r["seen"]} == partitions_used(shops)
    assert "per node:" in cli(env, "partitions", "scrapeme").stdout
    budget = cli(env, "budget", "scrapeme", "1000")
    assert budget.returncode == 0 and "1000" in budget.stdout, budget.stdout + budget.stderr
    for args in (("bad-seeds", "scrapeme"), ("log", "scrapeme", "--limit", "5"), ("proxies",),
                 ("report", "scrapeme", "--html", str(tmp_path / "report.html"))):
        done = cli(env, *args)
        assert done.returncode == 0 and "Traceback" not in done.stderr, (args, done.stderr[-2000:])
    assert cli(env, "health", "scrapeme", "--any-host").returncode in (0, 1)
    # export and the UI (#18) on a cluster: the stored items, the frontier summed over its partitions
    exported = cli(env, "export", "scrapeme", "-t", "csv", "--fields", "id,price")
    assert exported.returncode == 0, exported.stderr
    assert len(exported.stdout.splitlines()) == 1 + mongo_db.products.count_documents({})
    ui, base = start_ui(env, tmp_path)
    status, _, body = http(base + "/api/spiders/scrapeme/status")
    shown = json.loads(body)
    assert status == 200 and shown["partitions"] == PARTITIONS and shown["seen"] == sum(len(s.pages) for s in shops)
    assert http(base + "/api/spiders/scrapeme/pause", {}, headers={"X-Crawlhub": "1"})[0] == 200
    assert json.loads(cli(env, "status", "scrapeme", "--json").stdout)["paused"] is True
    ui.kill()
    assert cli(env, "reset", "scrapeme", "--yes").returncode == 0
    # the quality history (scrapeme:quality:*) outlives a reset by design: the last crawl is the next one's baseline
    kept = [k.decode() for k in client.scan_iter("scrapeme:quality:*", count=1000)]
    assert "scrapeme:quality:cycles" in kept, kept
    keys = [k.decode() for k in client.scan_iter("*scrapeme*", count=1000) if k.decode() not in kept]
    # the crawl state is gone from every node; the one key kept is the new epoch, which tells workers of the reset
    if recorded:
        assert "scrapeme:epoch" in keys and json.loads(client.get("scrapeme:epoch"))["why"] == "reset"
        left = [k for k in keys if k != "scrapeme:epoch"]
    else:
        epoch = LAYOUT.epoch  # (#30: partition 0's hash tag, with the other keys every round reads)
        assert epoch.startswith("{scrapeme:0") and epoch.endswith("}:epoch")
        assert epoch in keys and json.loads(client.get(epoch))["why"] == "reset"
        left = [k for k in keys if k != epoch]
    assert left == [], left


def steer_a_crawl_and_reset_it(cluster_env, cluster, site, mongo_db, tmp_path, recorded: str = ""):
    """Every crawlhub command on a crawl on the cluster (the layout ``recorded`` first, if given), ending with a
    reset: the client, and the keys named for scrapeme after the reset (its quality history aside)."""
    shops = start_shops(site, delay=0.1)
    client = cluster.client()
    env = cluster_env
    if recorded:
        client.set("scrapeme:partitions", recorded)
    for shop in shops:
        assert cli(env, "seed", "scrapeme", f"{shop.url}/shop/").returncode == 0
    assert cli(env, "pause", "scrapeme").returncode == 0
    worker = start_worker("scrapeme", env, tmp_path, "w0", CONCURRENT_REQUESTS=4)
    # the worker asked for requests and was told the crawl is paused (it logs it once)
    assert wait_for(lambda: "is paused (" in worker.log(), 60), "the worker never saw the pause"
    assert sum(len(s.fetched("/shop")) for s in shops) <= 4, "a paused crawl leased pages (seeds are fetched once)"
    out = cli(env, "status", "scrapeme", "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["paused"] is True
    assert cli(env, "resume", "scrapeme").returncode == 0
    wait_all([worker], 180)
    assert_each_page_once(shops, mongo_db)
    shown = cli(env, "limits", "show", "--json")
    assert shown.returncode == 0, shown.stderr
    assert {domain_of(s.url) for s in shops} <= {row["domain"] for row in json.loads(shown.stdout)}
    assert cli(env, "dlq", "list", "scrapeme").returncode == 0
    shown = cli(env, "partitions", "scrapeme", "--json")
    assert shown.returncode == 0, shown.stderr
    table = json.loads(shown.stdout)
    assert table["partitions"] == PARTITIONS and len(table["rows"]) == PARTITIONS
    assert sum(r["seen"] for r in table["rows"]) == sum(len(set(s.pages)) for s in shops)
    assert {r["node"] for r in table["rows"]} <= {f"127.0.0.1:{p}" for p in cluster.primaries()}
    assert {r["partition"] for r in table["rows"] if r["seen"]} == partitions_used(shops)
    assert "per node:" in cli(env, "partitions", "scrapeme").stdout
    budget = cli(env, "budget", "scrapeme", "1000")
    assert budget.returncode == 0 and "1000" in budget.stdout, budget.stdout + budget.stderr
    for args in (("bad-seeds", "scrapeme"), ("log", "scrapeme", "--limit", "5"), ("proxies",),
                 ("report", "scrapeme", "--html", str(tmp_path / "report.html"))):
        done = cli(env, *args)
        assert done.returncode == 0 and "Traceback" not in done.stderr, (args, done.stderr[-2000:])
    assert cli(env, "health", "scrapeme", "--any-host").returncode in (0, 1)
    # export and the UI (#18) on a cluster: the stored items, the frontier summed over its partitions
    exported = cli(env, "export", "scrapeme", "-t", "csv", "--fields", "id,price")
    assert exported.returncode == 0, exported.stderr
    assert len(exported.stdout.splitlines()) == 1 + mongo_db.products.count_documents({})
    ui, base = start_ui(env, tmp_path)
    status, _, body = http(base + "/api/spiders/scrapeme/status")
    shown = json.loads(body)
    assert status == 200 and shown["partitions"] == PARTITIONS and shown["seen"] == sum(len(s.pages) for s in shops)
    assert http(base + "/api/spiders/scrapeme/pause", {}, headers={"X-Crawlhub": "1"})[0] == 200
    assert json.loads(cli(env, "status", "scrapeme", "--json").stdout)["paused"] is True
    ui.kill()
    assert cli(env, "reset", "scrapeme", "--yes").returncode == 0
    # the quality history (scrapeme:quality:*) outlives a reset by design: the last crawl is the next one's baseline
    kept = [k.decode() for k in client.scan_iter("scrapeme:quality:*", count=1000)]
    assert "scrapeme:quality:cycles" in kept, kept
    keys = [k.decode() for k in client.scan_iter("*scrapeme*", count=1000) if k.decode() not in kept]
    return client, keys


def test_the_crawlhub_command_steers_a_crawl_of_a_new_frontier_on_a_cluster(cluster_env, cluster, site, mongo_db, tmp_path):
    client, keys = steer_a_crawl_and_reset_it(cluster_env, cluster, site, mongo_db, tmp_path)
    # the crawl state is gone from every node; the one key kept is the new epoch, which tells workers of the reset
    epoch = LAYOUT.epoch  # (#30: partition 0's hash tag, with the other keys every round reads)
    assert epoch.startswith("{scrapeme:0") and epoch.endswith("}:epoch")
    assert epoch in keys and json.loads(client.get(epoch))["why"] == "reset"
    left = [k for k in keys if k != epoch]
    assert left == [], left


def test_the_crawlhub_command_steers_a_crawl_laid_out_by_30_on_a_cluster(cluster_env, cluster, site, mongo_db,
                                                                          tmp_path):
    """A frontier laid out by #30 (recorded "placed": the keys every round reads under their own names,
    "scrapeme:epoch"...), which workers and commands of today keep using."""
    client, keys = steer_a_crawl_and_reset_it(cluster_env, cluster, site, mongo_db, tmp_path, f"{PARTITIONS}:placed")
    assert "scrapeme:epoch" in keys and json.loads(client.get("scrapeme:epoch"))["why"] == "reset"
    left = [k for k in keys if k != "scrapeme:epoch"]
    assert left == [], left


def test_a_worker_killed_mid_crawl_on_a_cluster_loses_nothing(cluster_env, cluster, site, mongo_db, tmp_path):
    shops = start_shops(site, delay=(0.05, 0.2))
    client = cluster.client()
    seed(client, shops)
    workers = [start_worker("scrapeme", cluster_env, tmp_path, f"w{i}", CONCURRENT_REQUESTS=4, **LEASES)
               for i in range(3)]
    total = SHOPS * PAGES
    deadline = time.monotonic() + 90
    while sum(len(set(s.fetched("/shop"))) for s in shops) < total * 0.3:
        assert time.monotonic() < deadline, "the crawl did not get going"
        time.sleep(0.1)
    # the victim is a worker that holds leases now (the first started may hold none at that moment: its domains'
    # slots taken by the others), read from every partition's lease book (lease id -> worker<TAB>...)
    def a_lease_holder():
        held = Counter(value.split(b"\t", 1)[0].decode() for part in LAYOUT.parts for value in client.hvals(part.leases))
        return next((w for w in workers if held[f"{socket.gethostname()}:{w.proc.pid}"]), None)

    victim = wait_for(a_lease_holder, max(deadline - time.monotonic(), 1), step=0.05)
    assert victim is not None, "no worker held a lease once the crawl was under way"
    workers.remove(victim)
    victim.proc.kill()  # SIGKILL: its leases stop being renewed
    victim.proc.wait()
    workers.append(start_worker("scrapeme", cluster_env, tmp_path, "w3", CONCURRENT_REQUESTS=4, **LEASES))
    wait_all(workers, 180)

    assert_each_page_once(shops, mongo_db, allow_refetch=True)
    reclaimed = int(client.hget("scrapeme:stats", "reclaimed") or 0)
    print(f"\nkill -9 on a cluster: {reclaimed} leases reclaimed")
    assert reclaimed > 0, "the killed worker held no lease: the test proved nothing"


def test_a_master_fails_over_to_its_replica_mid_crawl(env, site, mongo_db, tmp_path, tmp_path_factory):
    """kill -9 a master with a replica: the replica takes over, the crawl completes, no item twice.
    With FRONTIER_REPLICA_WAIT=1 a page's lease ends only once its links are on a replica too, so
    the failover loses no link; what it loses (the last writes) shows as pages fetched again.

    CRAWLHUB_FAILOVER_REPLICA_WAIT=0 measures plain asynchronous replication instead (docs/deploy.md):
    then it reports the pages never fetched rather than failing on them."""
    replica_wait = os.environ.get("CRAWLHUB_FAILOVER_REPLICA_WAIT", "1")
    with LocalRedisCluster(tmp_path_factory.mktemp("failover"), masters=3, replicas=1) as cluster:
        shops = start_shops(site, delay=(0.05, 0.15))
        client = cluster.client()
        seed(client, shops)
        cenv = dict(env)
        cenv.pop("REDIS_URL")
        # leases that outlive the failover (a few seconds), as LEASE_TTL's default does by far
        cenv.update(REDIS_CLUSTER_NODES=cluster.nodes, FRONTIER_PARTITIONS=str(PARTITIONS), FRONTIER_REPLICA_WAIT=replica_wait,
                    LEASE_TTL="15", LEASE_RECLAIM_INTERVAL="1", MAX_IDLE_TIME_BEFORE_CLOSE="3")
        workers = [start_worker("scrapeme", cenv, tmp_path, f"w{i}", CONCURRENT_REQUESTS=4) for i in range(3)]
        total = SHOPS * PAGES
        deadline = time.monotonic() + 90
        while sum(len(set(s.fetched("/shop"))) for s in shops) < total * 0.3:
            assert time.monotonic() < deadline, "the crawl did not get going"
            time.sleep(0.1)
        # the master holding the first shop's partition (it has work now)
        anchor = LAYOUT.part_of(domain_of(shops[0].url)).anchor
        master = client.get_node_from_key(anchor).port
        replica = cluster.replica_of(master)
        assert replica is not None
        killed_at = time.monotonic()
        fetched_before = sum(len(s.fetched("/shop")) for s in shops)
        cluster.kill(master)
        cluster.wait_promoted(replica, timeout=30)
        took_over = time.monotonic() - killed_at
        assert replica in cluster.primaries(), "the replica did not take over"
        wait_all(workers, 240)

        fetches = sum(len(s.fetched("/shop")) for s in shops)
        missing = sum(len(set(s.pages) - set(s.fetched("/shop"))) for s in shops)
        if replica_wait == "0" and missing:
            print(f"\nfailover (FRONTIER_REPLICA_WAIT=0): {missing} of {total} pages never fetched (links lost with "
                  f"the old master's last writes); {fetches} fetches")
            return
        refetched = assert_each_page_once(shops, mongo_db, allow_refetch=True)
        print(f"\nfailover (FRONTIER_REPLICA_WAIT={replica_wait}): replica {replica} took over from {master} in "
              f"{took_over:.1f}s; {fetched_before} fetches before the kill, {fetches} in all for {total} pages: "
              f"{sum(refetched.values()) - len(refetched)} re-fetches of {len(refetched)} pages; 0 items stored twice")


def test_partitions_are_placed_evenly_on_a_cluster_made_by_redis_cli_and_balance_evens_a_resharded_one(
        cluster_env, cluster):
    """#30: 48 partitions on the 3 masters `redis-cli --cluster create` made: 16 each (the unplaced tags of
    before gave 12/16/20). Moved out of balance by hand, `crawlhub partitions --balance --yes` evens them
    again, the queued requests moved with their slots."""
    from crawlhub.frontier.partitions import Partitions, claim_layout
    from crawlhub.frontier.placement import holders, move_slot
    from crawlhub.frontier.records import EnqueueOp

    client = cluster.client()
    keys = claim_layout(client, Keys.for_spider(Settings(), "scrapeme", partitions=48, cluster=True))
    assert keys.placed
    shown = cli(cluster_env, "partitions", "scrapeme", "--json")
    assert shown.returncode == 0, shown.stderr
    per_node = Counter(r["node"] for r in json.loads(shown.stdout)["rows"])
    assert len(per_node) == 3 and max(per_node.values()) - min(per_node.values()) <= 1, per_node
    before = sorted(len(ps) for ps in holders(client, keys.with_partitions(48, cluster=True, placed=False)).values())
    assert max(before) - min(before) > 1, f"the tags of before #30 were uneven here ({before}): this test shows nothing"
    # requests in every partition, then four partitions moved by hand from one master to another
    parts = Partitions(client, keys, {"rate": 0})
    ops = [EnqueueOp(hashlib.sha1(f"http://d{i}.test/".encode()).hexdigest(), json.dumps({"url": f"http://d{i}.test/"}).encode(),
                     0, False, "", f"d{i}.test") for i in range(200)]
    assert parts.tick(ops).tick.added == 200
    held = holders(client, keys)
    full, empty = sorted(held)[0], sorted(held)[1]
    for p in held[full][:4]:
        move_slot(client, int(json.loads(shown.stdout)["rows"][p]["slot"]), full, empty)
    uneven = {n: len(ps) for n, ps in holders(client, keys).items()}
    assert max(uneven.values()) - min(uneven.values()) >= 4, uneven
    dry = cli(cluster_env, "partitions", "scrapeme", "--balance", "--json")
    assert dry.returncode == 0, dry.stderr
    plan = json.loads(dry.stdout)
    assert plan["moves"] and not plan["moved"] and plan["per_node"] == uneven
    assert {n: len(ps) for n, ps in holders(client, keys).items()} == uneven, "without --yes nothing moves"
    done = cli(cluster_env, "partitions", "scrapeme", "--balance", "--yes")
    assert done.returncode == 0 and "moved partition" in done.stdout, done.stdout + done.stderr
    after = {n: len(ps) for n, ps in holders(cluster.client(), keys).items()}
    assert max(after.values()) - min(after.values()) <= 1, after
    again = cli(cluster_env, "partitions", "scrapeme", "--balance")
    assert "balanced" in again.stdout, again.stdout
    fresh = Partitions(cluster.client(), keys, {"rate": 0})
    assert fresh.counts()["queued"] == 200, "the queued requests moved with their slots"
    taken = []
    for _ in range(40):
        taken += fresh.tick(n=50, worker="w").tick.taken
        if len(taken) == 200:
            break
    assert len(taken) == 200 and len({t.lease_id for t in taken}) == 200


def test_a_worker_that_starts_while_the_cluster_is_down_waits_for_it_and_says_so(tmp_path, caplog):
    """Every node answers PING while the cluster is down (here: a slot no master serves); a starting worker's
    connection waits for cluster_state:ok, saying why, instead of failing its first keyed command with
    CLUSTERDOWN; past REDIS_STARTUP_WAIT it stops with a one-line reason."""
    from crawlhub.connection import Unreachable, connect_redis

    with LocalRedisCluster(tmp_path / "down", masters=3) as cluster:
        port = cluster.primaries()[0]
        node = redis_client_of(port)
        slot = int(node.execute_command("CLUSTER", "SLOTS")[0][0])  # (a slot of some master)
        owner = redis_client_of(int(node.execute_command("CLUSTER", "SLOTS")[0][2][1]))
        owner.execute_command("CLUSTER", "DELSLOTS", slot)
        assert wait_for(lambda: owner.cluster("info")["cluster_state"] == "fail", 10), "a slot unserved: down"
        settings = Settings({"REDIS_CLUSTER_NODES": cluster.nodes, "REDIS_STARTUP_WAIT": 1.5})
        with pytest.raises(Unreachable, match="the cluster is down"):
            connect_redis(settings)
        assert "is not ready (the cluster is down" in caplog.text and "retrying in" in caplog.text
        owner.execute_command("CLUSTER", "ADDSLOTS", slot)
        cluster.wait_ok()
        client = connect_redis(Settings({"REDIS_CLUSTER_NODES": cluster.nodes, "REDIS_STARTUP_WAIT": 10}))
        assert client.exists("crawlhub:probe") == 0, "keyed commands work once it is up"
        client.close()


def test_a_frontier_that_opens_while_the_cluster_goes_down_waits_for_it_and_says_so(tmp_path, caplog):
    """The cluster answered when the worker connected and is down when its frontier opens (its first keyed
    commands): the opening is tried again, saying why, and goes on once the cluster is back; no traceback."""
    import logging

    from scrapy import Spider
    from scrapy.utils.test import get_crawler

    from crawlhub.frontier.scheduler import RedisScheduler
    from tests.helpers import project_settings

    with LocalRedisCluster(tmp_path / "down", masters=3) as cluster:
        crawler = get_crawler(Spider, settings_dict=project_settings(
            REDIS_CLUSTER_NODES=cluster.nodes, FRONTIER_PARTITIONS="4", REDIS_STARTUP_WAIT="20"))
        scheduler = RedisScheduler.from_crawler(crawler)  # connected: the cluster is ok
        node = redis_client_of(cluster.primaries()[0])
        slots = node.execute_command("CLUSTER", "SLOTS")
        owners = [(int(start), int(end), redis_client_of(int(info[1]))) for start, end, info, *_ in slots]
        for start, end, owner in owners:  # every slot unserved: down, whichever key the opening reads first
            owner.execute_command("CLUSTER", "DELSLOTSRANGE", start, end)
        assert wait_for(lambda: node.cluster("info")["cluster_state"] == "fail", 10), "no slot served: down"

        class BackOnRetry(logging.Handler):  # the cluster comes back once the worker said it waits
            def emit(self, record):
                if "failed while the frontier opened" in record.getMessage():
                    logging.getLogger("crawlhub.connection").removeHandler(self)
                    for start, end, owner in owners:
                        owner.execute_command("CLUSTER", "ADDSLOTSRANGE", start, end)

        logging.getLogger("crawlhub.connection").addHandler(BackOnRetry())
        scheduler._open_frontier(Spider("down"))
        assert "failed while the frontier opened" in caplog.text and "retrying in" in caplog.text
        assert scheduler.frontier.keys.seeds == "down:start_urls", "opened once the cluster was back"
        scheduler.frontier.server.close()
