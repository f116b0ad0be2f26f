"""Scrapy and scrapy-redis habits in a crawlhub project (issue #28): real workers on a local https site with a
redirect. A spider's redis_key, start_urls, a set of seeds, a seeds key of the wrong type, settings crawlhub cannot
honour, bad MongoDB and Redis URLs, a bad revisit duration: each honoured, or refused in one line and exit code 2."""


from __future__ import annotations

import json
import subprocess

from tests.harness import ROOT, SCRAPY, cli, run_workers, start_worker, wait_all
from tests.integration.test_defects import html, redirect
from tests.sites.server import refused_port

TEST_SPIDERS = "spiders,tests.sites.spiders"


def scrapy(env, *args, timeout=120) -> subprocess.CompletedProcess:
    return subprocess.run([*SCRAPY, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


def test_redis_key_start_urls_and_set_seeds_are_honoured_and_a_wrong_key_is_reported_alone(
        env, site, redis_client, mongo_db, tmp_path):
    shop = site({"/": html("home", "/a", "/moved"), "/a": html("a"), "/moved": redirect("/b"), "/b": html("b"),
                 "/c": html("c")}, tls=True)
    env = {**env, "SPIDER_MODULES": TEST_SPIDERS, "T_START_URLS": f"{shop.url}/", "STATUS_DONE_AFTER": "0"}

    # two workers, no seed pushed: the spider's start_urls seed the shared frontier once for both
    workers = [start_worker("t_habit", env, tmp_path, f"habit-{n}") for n in range(2)]
    wait_all(workers, 120)
    logs = "".join(w.log() for w in workers)
    assert sorted(d["title"] for d in mongo_db.pages.find()) == ["a", "b", "home"], logs[-3000:]
    assert shop.fetched("/").count("/") == 1, "start_urls seeded the crawl once, not once per worker"
    assert "t_habit:custom_seeds" in logs and "t_habit:start_urls" not in logs, "the spider's redis_key is read"
    assert json.loads(redis_client.get("t_habit:seeded"))["urls"] == 1
    assert logs.count("Seeded the crawl with the spider's 1 start_urls") == 1 and "already seeded" in logs

    # the crawl done: status says so; a seed added as a set member (scrapy-redis' REDIS_START_URLS_AS_SET) is read
    done = cli(env, "status", "t_habit", "--json")
    assert done.returncode == 0 and json.loads(done.stdout)["state"] == "done", done.stdout[-2000:] + done.stderr
    assert "done: the frontier has been empty" in cli(env, "status", "t_habit").stdout
    redis_client.sadd("t_habit:custom_seeds", f"{shop.url}/c")
    (again,) = run_workers("t_habit", env, tmp_path, 1)
    log = again.log()
    assert mongo_db.pages.count_documents({"title": "c"}) == 1, log[-3000:]
    assert "This crawl has already seen" in log and "crawlhub reset t_habit" in log, "a re-run says why it stores little"
    assert "already seeded for this crawl" in log and shop.fetched("/").count("/") == 1
    pushed = cli(env, "seed", "t_habit", f"{shop.url}/a")
    assert pushed.returncode == 0 and "to t_habit:custom_seeds" in pushed.stdout
    redis_client.delete("t_habit:custom_seeds")

    # a seeds key of the wrong type: reported for its spider, never a traceback, never for the other spiders
    redis_client.hset("t_habit:custom_seeds", "not", "a list")
    redis_client.lpush("scrapeme:start_urls", f"{shop.url}/")
    overview = cli(env, "status")
    assert overview.returncode == 0 and "Traceback" not in overview.stderr, overview.stderr[-3000:]
    assert "!! seeds key t_habit:custom_seeds is a Redis hash" in overview.stdout
    assert "spider scrapeme: 1 seeds waiting" in overview.stdout
    refused = cli(env, "seed", "t_habit", f"{shop.url}/a")
    assert refused.returncode == 1 and "nothing pushed" in refused.stderr and "Traceback" not in refused.stderr
    (stuck,) = run_workers("t_habit", env, tmp_path, 1)
    log = stuck.log()
    assert log.count("seeds key t_habit:custom_seeds is a Redis hash") == 1 and "Traceback" not in log, log[-3000:]
    assert redis_client.hget("t_habit:custom_seeds", "not") == b"a list", "nothing of the user's key is touched"


def test_what_crawlhub_cannot_honour_stops_the_worker_in_one_line(env, tmp_path):
    env = {**env, "SPIDER_MODULES": TEST_SPIDERS}
    down = refused_port()
    cases = [
        (["generic", "-s", "SCHEDULER_QUEUE_CLASS=scrapy_redis.queue.PriorityQueue"], env, "per-domain priority queues"),
        (["generic", "-s", "SCHEDULER_SERIALIZER=scrapy_redis.picklecompat"], env, "JSON only"),
        (["generic", "-s", "SCHEDULER_IDLE_BEFORE_CLOSE=10"], env, "MAX_IDLE_TIME_BEFORE_CLOSE"),
        (["t_bad_revisit"], env, "revisit"),
        (["generic"], {**env, "REDIS_URL": "localhost:6379"}, "is not a Redis URL"),
        (["generic"], {**env, "MONGO_URI": "mongodb://crawler:p%zz@127.0.0.1:27017/"}, "is not a MongoDB URI"),
        (["generic"], {**env, "MONGO_URI": f"mongodb://127.0.0.1:{down}/", "MONGO_STARTUP_WAIT": "1"},
         "cannot reach MongoDB"),
        # a setting out of its range, from the environment or the command line; one that is not of its type
        (["generic"], {**env, "FRONTIER_PARTITIONS": "-3"}, "FRONTIER_PARTITIONS=-3: must be 1 or more"),
        (["generic", "-s", "LEASE_TTL=0"], env, "setting LEASE_TTL = '0': must be more than 0"),
        (["generic"], {**env, "CONCURRENT_REQUESTS": "2.5"}, "environment variable CONCURRENT_REQUESTS='2.5'"),
    ]
    for args, with_env, said in cases:
        done = scrapy(with_env, "crawl", *args)
        lines = [line for line in done.stderr.splitlines() if line.startswith("crawlhub:")]
        assert done.returncode == 2 and any(said in line for line in lines), (args, done.stderr[-3000:])
        assert "Traceback" not in done.stderr and "Topology Description" not in done.stderr, done.stderr[-3000:]
        assert "p%zz" not in done.stderr, "the password is never shown"
        assert "Spider opened" not in done.stderr, "nothing was crawled"
    for bad in ({"FRONTIER_PARTITIONS": "-3"}, {"FRONTIER_PARTITIONS": "abc"}):  # the crawlhub command refuses them too
        told = cli({**env, **bad}, "status", "generic")
        assert told.returncode == 2 and "FRONTIER_PARTITIONS=" in told.stderr, told.stderr[-3000:]
        assert "Traceback" not in told.stderr, told.stderr[-3000:]
    waiting = scrapy({**env, "REDIS_URL": f"redis://127.0.0.1:{down}/0", "REDIS_STARTUP_WAIT": "2"}, "crawl", "generic")
    assert waiting.returncode == 2 and "waiting up to 2s for it (REDIS_STARTUP_WAIT)" in waiting.stderr, waiting.stderr
