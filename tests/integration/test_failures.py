"""Integration: servers that are down, and secrets that must not leak."""

from __future__ import annotations

import json
import signal
import time

import redis

from crawlhub.services import free_port
from tests.harness import all_redis_values, cli, queued, redis_with_password, run_workers, start_worker
from tests.sites.shop import shop_pages


def test_redis_down_is_a_clear_error_and_a_failed_exit(env, tmp_path):
    port = free_port()  # nothing listens here
    env = dict(env, REDIS_URL=f"redis://:hunter2@127.0.0.1:{port}/0", REDIS_STARTUP_WAIT="2")
    worker = start_worker("scrapeme", env, tmp_path, "no-redis")
    assert worker.wait(60) != 0
    log = worker.log()
    assert f"cannot reach Redis at redis://:***@127.0.0.1:{port}/0" in log
    assert "is not answering" in log and "retrying in" in log
    assert "hunter2" not in log


def test_mongodb_down_loses_nothing_and_says_where_items_went(env, site, redis_client, mongo_db, tmp_path):
    """MongoDB never comes up: the worker waits, keeping its leases; stopped, it gives them back. The next
    worker, with MongoDB, stores them: status' items equal the store (the unsaved items are not counted)."""
    shop = site(shop_pages(16, 8))
    working = env
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
    assert "crawlhub: WARNING: cannot reach MongoDB" in log and "starting anyway" in log, "said at start"
    (saved,) = list((tmp_path / "home" / "unsaved").glob("scrapeme-*.jsonl"))
    rows = [json.loads(line) for line in saved.read_text().splitlines()]
    assert sorted(r["doc"]["id"] for r in rows) == [str(700 + i) for i in range(16)]
    assert {r["collection"] for r in rows} == {"products"}
    # and the pages themselves went back to the queue for the next worker
    assert redis_client.zcard("scrapeme:inflight") == 0
    assert queued(redis_client, "scrapeme") == 2
    assert "Gave 2 unfinished requests back to the shared queue" in log
    run_workers("scrapeme", working, tmp_path, 1)
    assert mongo_db.products.count_documents({}) == 16
    status = json.loads(cli(working, "status", "scrapeme", "--json").stdout)
    assert status["totals"]["items"] == 16 == status["items"]["stored"]["products"], (status["totals"], status["items"])


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


def test_sigterm_while_mongodb_is_down_exits_within_the_grace_period(env, site, redis_client, tmp_path):
    """Default timeouts and a full item buffer (back-pressure): SIGTERM still ends the worker well within
    the 60 s deploy/ gives it, with the items in unsaved/ and the leases given back."""
    shop = site(shop_pages(48, 4))  # 12 pages of 4 products
    env = dict(env, MONGO_URI=f"mongodb://127.0.0.1:{free_port()}/", MONGO_BATCH_SIZE="4", MONGO_BUFFER_MAX="8")
    redis_client.lpush("scrapeme:start_urls", f"{shop.url}/shop/")
    worker = start_worker("scrapeme", env, tmp_path, "no-mongo")
    deadline = time.monotonic() + 90
    while "taking no new requests until it is back" not in worker.log():
        assert time.monotonic() < deadline and worker.proc.poll() is None, worker.log()[-3000:]
        time.sleep(0.2)
    held = redis_client.zcard("scrapeme:inflight")
    assert held >= 2, "pages whose items wait for MongoDB keep their leases"
    stopped = time.monotonic()
    worker.proc.send_signal(signal.SIGTERM)
    assert worker.wait(60) == 0
    took = time.monotonic() - stopped
    assert took < 45, f"{took:.0f}s to stop"
    log = worker.log()
    assert "MongoDB unreachable at close:" in log and "written to" in log
    (saved,) = list((tmp_path / "home" / "unsaved").glob("scrapeme-*.jsonl"))
    assert len(saved.read_text().splitlines()) >= 8
    assert redis_client.zcard("scrapeme:inflight") == 0, "every lease was given back"
