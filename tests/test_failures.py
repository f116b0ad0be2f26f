"""Integration: servers that are down, and secrets that must not leak."""

from __future__ import annotations

import json
import signal
import time

import redis

from crawlhub.services import free_port
from crawlhub.sites import shop_pages
from tests.harness import all_redis_values, queued, redis_with_password, run_workers, start_worker


def test_redis_down_is_a_clear_error_and_a_failed_exit(env, tmp_path):
    port = free_port()  # nothing listens here
    env = dict(env, REDIS_URL=f"redis://:hunter2@127.0.0.1:{port}/0", REDIS_STARTUP_WAIT="2")
    worker = start_worker("scrapeme", env, tmp_path, "no-redis")
    assert worker.wait(60) != 0
    log = worker.log()
    assert f"cannot reach Redis at redis://:***@127.0.0.1:{port}/0" in log
    assert "is not answering" in log and "retrying in" in log
    assert "hunter2" not in log


def test_mongodb_down_loses_nothing_and_says_where_items_went(env, site, redis_client, tmp_path):
    """MongoDB never comes up: the worker waits, keeping its leases; stopped, it gives them back."""
    shop = site(shop_pages(16, 8))
    env = dict(env, MONGO_URI=f"mongodb://127.0.0.1:{free_port()}/", MONGO_SERVER_SELECTION_TIMEOUT_MS="300",
               MONGO_CLOSE_RETRIES="2", MONGO_BATCH_SIZE="5")
    redis_client.lpush("scrapeme:start_urls", f"{shop.url}/shop/")
    worker = start_worker("scrapeme", env, tmp_path, "no-mongo")
    deadline = time.monotonic() + 60
    while "keeping them for the next flush" not in worker.log() or len(shop.fetched("/shop")) < 2:
        assert time.monotonic() < deadline and worker.proc.poll() is None, worker.log()[-3000:]
        time.sleep(0.2)
    time.sleep(2)
    assert worker.proc.poll() is None, "a worker does not finish while its pages' items are unstored"
    assert redis_client.zcard("scrapeme:inflight") == 2, "unstored pages keep their leases"
    worker.proc.send_signal(signal.SIGTERM)
    assert worker.wait(60) == 0
    log = worker.log()
    assert "MongoDB unreachable at close: 16 items and 0 quarantined items written to" in log
    (saved,) = list((tmp_path / "home" / "unsaved").glob("scrapeme-*.jsonl"))
    rows = [json.loads(line) for line in saved.read_text().splitlines()]
    assert sorted(r["doc"]["id"] for r in rows) == [str(700 + i) for i in range(16)]
    assert {r["collection"] for r in rows} == {"products"}
    # and the pages themselves went back to the queue for the next worker
    assert redis_client.zcard("scrapeme:inflight") == 0
    assert queued(redis_client, "scrapeme") == 2
    assert "Gave 2 unfinished requests back to the shared queue" in log


def test_redis_password_never_appears_in_logs_records_or_items(env, site, mongo_db, tmp_path):
    with redis_with_password("s3cr3t-pw") as port:
        url = f"redis://:s3cr3t-pw@127.0.0.1:{port}/0"
        client = redis.Redis.from_url(url)
        shop = site(shop_pages(16, 8))
        client.lpush("scrapeme:start_urls", f"{shop.url}/shop/")
        (worker,) = run_workers("scrapeme", dict(env, REDIS_URL=url, LOG_LEVEL="DEBUG"), tmp_path, 1)
        assert mongo_db.products.count_documents({}) == 16
        assert "s3cr3t-pw" not in worker.log()
        assert b"s3cr3t-pw" not in all_redis_values(client)
        assert "s3cr3t-pw" not in repr(list(mongo_db.products.find()))
