"""The frontier's fixed costs (#30): what an idle worker sends Redis, counted in commands, not timed."""

from __future__ import annotations

import collections
import json
import time

import redis

from crawlhub.services import EmbeddedRedis
from tests.harness import cli, crawl_env, start_worker, wait_for

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
