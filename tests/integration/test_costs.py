"""The frontier's fixed costs (#30): what an idle worker sends Redis, counted in commands, not timed."""

from __future__ import annotations

import collections
import json
import time

import redis
from scrapy.settings import Settings

from crawlhub.frontier.keys import Keys
from crawlhub.services import EmbeddedRedis
from tests.harness import cli, crawl_env, start_worker, wait_all, wait_for
from tests.redis_cluster import LocalRedisCluster
from tests.sites.shop import shop_pages

WINDOW = 10.0  # seconds of idle traffic counted
# An idle worker's own traffic, whatever FRONTIER_PARTITIONS: the poller's check (one command per
# FRONTIER_POLL_INTERVAL, 0.5 s), the engine's 5-second round (one pipeline on the hints, the budget and
# the epoch, and the seeds), the upkeep's second (heartbeats of the others every 2 s, the reclaim lock
# every 5 s), the heartbeat and the quality and stats writers: about 65 commands in 10 s at 1 partition and
# at 48 (40,530 at 48 before #30: two ZCARDs per partition on every check, in a loop). 15 a second is the bound.
BOUND = 15 * WINDOW


def idle_commands(tmp_path, mongo_uri, mongo_db, partitions: int) -> collections.Counter[str]:
    """Start a private redis-server and one worker with nothing to crawl; count what it sends in WINDOW seconds
    (top-level commands, from MONITOR: those a script runs are not the worker's)."""
    server = EmbeddedRedis(tmp_path / f"redis{partitions}")
    server.ensure()
    try:
        client = redis.Redis.from_url(server.url(), socket_timeout=1)
        env = crawl_env(server.url(), mongo_uri, mongo_db.name, tmp_path / "home", MAX_IDLE_TIME_BEFORE_CLOSE=0)
        worker = start_worker("scrapeme", env, tmp_path / "logs", f"idle{partitions}", FRONTIER_PARTITIONS=partitions)
        assert wait_for(lambda: client.hlen("scrapeme:workers"), 60), worker.log()[-3000:]
        # past its start (the engine's first rounds, the store's connection): its second heartbeat
        first = client.hvals("scrapeme:workers")
        assert wait_for(lambda: client.hvals("scrapeme:workers") != first, 30), worker.log()[-3000:]
        if partitions > 1:  # and past its first lease round, which probes every partition never hinted (a script
            # each) and hints it: on a loaded machine that round came after the second heartbeat, in the window
            ready = Keys.for_spider(Settings(), "scrapeme", partitions=partitions).ready
            assert wait_for(lambda: client.zcard(ready) >= partitions, 60), worker.log()[-3000:]
        counted: collections.Counter[str] = collections.Counter()
        before = json.loads(next(iter(client.hvals("scrapeme:workers"))))
        # (a socket timeout longer than any gap in an idle worker's traffic: redis-py drops a connection that
        # timed out; the upkeep asks every 2 s at the most)
        watcher = redis.Redis.from_url(server.url(), socket_timeout=10)
        with watcher.monitor() as monitor:
            end, end_wall = time.monotonic() + WINDOW, time.time() + WINDOW
            while time.monotonic() < end:
                command = monitor.next_command()
                if command.get("client_type") != "lua":
                    counted[command["command"].split()[0].upper()] += 1
        assert worker.proc.poll() is None, worker.log()[-3000:]
        # the worker's own count (its heartbeat's redis_commands, what `crawlhub status` shows per second) agrees
        # with what the server saw: the next heartbeat after the window, against the one before it
        assert wait_for(lambda: json.loads(next(iter(client.hvals("scrapeme:workers"))))["last_beat"] > end_wall, 30)
        after = json.loads(next(iter(client.hvals("scrapeme:workers"))))
        own = (after["redis_commands"] - before["redis_commands"]) / (after["last_beat"] - before["last_beat"])
        seen = sum(counted.values()) / WINDOW
        assert 0.6 * seen <= own <= 1.6 * seen + 1, f"the worker counted {own:.1f} commands/s, the server saw {seen:.1f}"
        assert after["redis_per_s"] > 0
        # each worker's rate, as `crawlhub status` shows it (a heartbeat may come while the command runs)
        shown = cli(env, "status", "scrapeme")
        rates = {json.loads(v)["redis_per_s"] for v in [*client.hvals("scrapeme:workers"), json.dumps(after)]}
        assert shown.returncode == 0 and any(f"redis={r:g}/s" in shown.stdout for r in rates), shown.stdout
        worker.kill()
        return counted
    finally:
        server.stop()


def test_an_idle_worker_costs_redis_the_same_at_48_partitions_as_at_1(tmp_path, mongo_uri, mongo_db):
    one = idle_commands(tmp_path, mongo_uri, mongo_db, 1)
    many = idle_commands(tmp_path, mongo_uri, mongo_db, 48)
    n1, n48 = sum(one.values()), sum(many.values())
    shown = f"1 partition: {n1} {dict(one)}; 48 partitions: {n48} {dict(many)}"
    assert n48 <= BOUND, f"an idle worker at 48 partitions sent {n48} commands in {WINDOW:.0f} s (bound {BOUND:.0f}): {shown}"
    assert n48 <= 1.5 * n1 + 10, f"the idle cost grows with the partitions: {shown}"
    assert many["ZCARD"] + many["ZCOUNT"] <= 2 * WINDOW / 0.5 + 10, f"the idle check is one command per poll: {shown}"
    print(f"\nidle commands in {WINDOW:.0f} s: {shown}")


def worker_connections(tmp_path, mongo_uri, mongo_db, site, cluster: bool) -> dict[int, int]:
    """One worker's whole `scrapy crawl` of a small shop (start, crawl, close on idle), on a private redis-server or
    a 3-master cluster, FRONTIER_PARTITIONS=8: the connections each Redis node received meanwhile (INFO stats'
    total_connections_received; the test's own clients connect before the first reading)."""
    shop = site(shop_pages(16, 4), delay=0.02)
    if cluster:
        nodes = LocalRedisCluster(tmp_path / "cluster", masters=3, appendonly=False).start()
        ports, stop = nodes.primaries(), nodes.stop
        env = crawl_env("", mongo_uri, mongo_db.name, tmp_path / "home", MAX_IDLE_TIME_BEFORE_CLOSE=2)
        env.pop("REDIS_URL")
        env["REDIS_CLUSTER_NODES"] = nodes.nodes
        seeder = nodes.client()
    else:
        server = EmbeddedRedis(tmp_path / "redis")
        server.ensure()
        ports, stop = [server.port], server.stop
        env = crawl_env(server.url(), mongo_uri, mongo_db.name, tmp_path / "home", MAX_IDLE_TIME_BEFORE_CLOSE=2)
        seeder = redis.Redis.from_url(server.url())
    try:
        readers = {port: redis.Redis(port=port) for port in ports}
        seeder.lpush("scrapeme:start_urls", f"{shop.url}/shop/")
        before = {port: int(r.info("stats")["total_connections_received"]) for port, r in readers.items()}
        worker = start_worker("scrapeme", env, tmp_path / "logs", f"conn{int(cluster)}", FRONTIER_PARTITIONS=8)
        wait_all([worker], 120)
        assert len(set(shop.fetched("/shop"))) == 4 and mongo_db.products.count_documents({}) == 16, worker.log()[-3000:]
        return {port: int(r.info("stats")["total_connections_received"]) - before[port] for port, r in readers.items()}
    finally:
        stop()


def test_a_worker_connects_to_each_redis_node_once(tmp_path, mongo_uri, mongo_db, site):
    """#30: a new connection costs a Redis server some 0.4 ms of CPU (accept, HELLO, the client's name, the close),
    as much as a page's whole crawl on one server. A worker made ten on a 3-master cluster at each start: the crawl
    command's checks and the scheduler each made a cluster client (a connection to each master, one more for the
    slots, one more for the command table, which redis-py 8 closes at the end of its set-up). Now the scheduler
    takes over the checks' client, and the command table is read on a connection that stays: one connection to
    each node, and on a cluster the one that reads the slots."""
    single = worker_connections(tmp_path / "single", mongo_uri, mongo_db, site, cluster=False)
    assert sum(single.values()) <= 1, f"a worker connected {single} times to one redis-server"
    mongo_db.products.delete_many({})
    spread = worker_connections(tmp_path / "cluster", mongo_uri, mongo_db, site, cluster=True)
    assert sum(spread.values()) <= len(spread) + 1, f"a worker made {spread} connections (per master) to a cluster"
    assert all(n >= 1 for n in spread.values()), f"the worker did not reach every master: {spread}"
    print(f"\nconnections of one worker: one redis-server {single}, a 3-master cluster {spread}")
