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
