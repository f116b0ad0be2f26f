"""Integration: the `crawlhub` command, embedded servers, and `scrapy genspider -t crawlhub`."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys

from scrapy.settings import Settings

from crawlhub import services
from crawlhub.connection import redis_shown
from crawlhub.services import EmbeddedMongo, EmbeddedRedis, free_port
from tests.frontier_ops import Frontier, Keys
from tests.harness import ROOT, SCRAPY, http, run_workers, start_ui, wait_for
from tests.helpers import project_settings
from tests.sites.shop import shop_pages

CRAWLHUB = [sys.executable, "-m", "crawlhub.cli"]


def run(cmd, env, cwd=ROOT, input=None):
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=120, input=input)


def test_seed_status_bad_seeds_and_reset(env, redis_client):
    good = ["https://s.example/shop/", '{"url": "https://s.example/x", "priority": 2}']
    out = run([*CRAWLHUB, "seed", "scrapeme", good[0], "ftp://nope", good[1]], env)
    assert out.returncode == 2, "a refused seed makes the command fail (bad input)"
    assert "refused 'ftp://nope': scheme 'ftp'" in out.stderr and "nothing pushed" in out.stderr
    assert redis_client.llen("scrapeme:start_urls") == 0
    # a callback is checked as the workers check it (crawlhub.seeds.seed_callback), on the spider's class
    close = '{"url": "https://s.example/", "callback": "close"}'
    out = run([*CRAWLHUB, "seed", "scrapeme", good[0], close, '{"url": "https://s.example/", "callback": "parse"}'], env)
    assert out.returncode == 2 and f"refused {close!r}: callback 'close' is not a method of spider 'scrapeme'" in out.stderr
    assert "1 of 3 seed(s) refused; nothing pushed" in out.stderr and redis_client.llen("scrapeme:start_urls") == 0
    out = run([*CRAWLHUB, "seed", "scrapeme", *good], env)
    assert "pushed 2 seed(s) to scrapeme:start_urls" in out.stdout
    assert redis_client.llen("scrapeme:start_urls") == 2

    frontier = Frontier(redis_client, Keys.for_spider(Settings(project_settings()), "scrapeme"), "scrapeme")
    for path in ("/a", "/b", "/a"):  # the second /a is a duplicate
        frontier.enqueue(f"http://shop.test{path}", b'{"url": "http://shop.test%s"}' % path.encode(), 0, domain="shop.test")
    assert "0 bad seed(s) in scrapeme:bad_seeds" in run([*CRAWLHUB, "bad-seeds", "scrapeme"], env).stdout
    redis_client.lpush("scrapeme:bad_seeds", json.dumps({"seed": "ftp://x", "reason": "scheme 'ftp' is not http or https"}))
    status = json.loads(run([*CRAWLHUB, "status", "scrapeme", "--json"], env).stdout)
    assert (status["seeds"], status["queued"], status["seen"], status["bad_seeds"]) == (2, 2, 2, 1)
    text = run([*CRAWLHUB, "status", "scrapeme"], env).stdout
    assert "2 seeds waiting, 2 queued, 0 in flight" in text and "2 URLs seen" in text

    listed = run([*CRAWLHUB, "bad-seeds", "scrapeme"], env).stdout
    assert "scheme 'ftp' is not http or https: 'ftp://x'" in listed
    assert "1 bad seed(s) in scrapeme:bad_seeds" in listed
    # a binary seed is shown as it was pushed: one backslash per undecodable byte
    binary = b"\xff\xfehttp://x\n"
    redis_client.lpush("scrapeme:bad_seeds", json.dumps({"seed": binary.decode("utf-8", "backslashreplace"),
                                                          "reason": "not UTF-8"}))
    listed = run([*CRAWLHUB, "bad-seeds", "scrapeme"], env).stdout
    assert "not UTF-8: '\\xff\\xfehttp://x\\n'" in listed, listed
    redis_client.lpop("scrapeme:bad_seeds")

    refused = run([*CRAWLHUB, "reset", "scrapeme"], env, input="n\n")
    assert refused.returncode != 0 and redis_client.keys("scrapeme:dupefilter:*")
    assert run([*CRAWLHUB, "reset", "scrapeme", "--yes"], env).returncode == 0
    assert not redis_client.keys("scrapeme:*")
    # the keys of a spider that no longer exists can be cleaned; a name with no keys is still refused
    redis_client.lpush("retired:start_urls", "https://s.example/")
    redis_client.set("retired:dupefilter:count", 1)
    assert run([*CRAWLHUB, "reset", "retired", "--yes"], env).returncode == 0
    assert not redis_client.keys("retired:*")
    unknown = run([*CRAWLHUB, "reset", "nosuchspider", "--yes"], env)
    assert unknown.returncode == 2 and "unknown spider 'nosuchspider'" in unknown.stderr


def test_embedded_servers_are_started_once_and_shared(site, tmp_path):
    """REDIS_URL and MONGO_URI unset: two workers start/reuse one local Redis and MongoDB-wire server."""
    home = tmp_path / "home"
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "MONGO_URI")}
    # "standard" ports for this test (tests never take 6379/27017): the servers listen there when free
    redis_port, mongo_port = free_port(), free_port()
    env.update(CRAWLHUB_HOME=str(home), MAX_IDLE_TIME_BEFORE_CLOSE="2", MONGO_FLUSH_INTERVAL="0.5",
               EMBEDDED_REDIS_PORT=str(redis_port), EMBEDDED_MONGO_PORT=str(mongo_port))
    shop = site(shop_pages(64, 8), delay=0.05)
    try:
        up = run([*CRAWLHUB, "services", "up"], env)
        assert up.returncode == 0, up.stderr
        assert "redis  up   redis://127.0.0.1:" in up.stdout
        assert f"redis  up   redis://127.0.0.1:{redis_port}/0" in up.stdout
        assert f"mongo  up   mongodb://127.0.0.1:{mongo_port}/" in up.stdout
        assert f"seed a crawl: redis-cli -p {redis_port} lpush SPIDER:start_urls URL" in up.stdout
        assert run([*CRAWLHUB, "seed", "scrapeme", f"{shop.url}/shop/"], env).returncode == 0
        redis_pid = EmbeddedRedis(home).pid
        workers = run_workers("scrapeme", env, tmp_path, 2, CONCURRENT_REQUESTS=2)
        assert (f"Shared frontier on Redis redis://127.0.0.1:{redis_port}/0 (embedded); seed it with: "
                f"crawlhub seed scrapeme URL (or: redis-cli -p {redis_port} lpush scrapeme:start_urls URL)") in workers[0].log()
        assert EmbeddedRedis(home).pid == redis_pid, "workers reused the running server"
        assert (home / "redis" / "appendonlydir").is_dir(), "AOF is on"
        assert (home / "mongo" / "data").is_dir()

        import pymongo

        client = pymongo.MongoClient(EmbeddedMongo(home).url())
        assert client.crawlhub.products.count_documents({}) == 64
        client.close()
        status = run([*CRAWLHUB, "services", "status"], env).stdout
        assert "redis  running" in status and "mongo  running" in status and "(unset: embedded)" in status
        # export and the UI (#18) with no arguments find the embedded servers too
        exported = run([*CRAWLHUB, "export", "scrapeme"], env)
        assert exported.returncode == 0 and len(exported.stdout.splitlines()) == 64, exported.stderr
        ui, base = start_ui(env, tmp_path)
        assert wait_for(lambda: json.loads(http(base + "/api/spiders/scrapeme/status")[2])["items"].get("stored")
                        == {"products": 64}, 15), ui.log()
        ui.kill()
        assert f"(Redis redis://127.0.0.1:{redis_port}/0 (embedded), MongoDB embedded," in ui.log()
    finally:
        down = run([*CRAWLHUB, "services", "down"], env)
    assert "redis  stopped" in down.stdout and "mongo  stopped" in down.stdout
    assert not EmbeddedRedis(home).running() and not EmbeddedMongo(home).running()


def test_embedded_redis_takes_the_standard_port_when_free_else_says_where(tmp_path, caplog):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        server = EmbeddedRedis(tmp_path / "a", standard_port=port)
        try:
            with caplog.at_level("WARNING", logger="crawlhub.services"):
                url = server.ensure()
            assert server.port != port and url == f"redis://127.0.0.1:{server.port}/0"
            assert f"port {port} is taken" in caplog.text
            assert (f"seed with: crawlhub seed SPIDER URL (or: redis-cli -p {server.port} lpush SPIDER:start_urls URL)"
                        in caplog.text)
        finally:
            server.stop()
    free = EmbeddedRedis(tmp_path / "b", standard_port=port)  # the port is free now: it is used
    try:
        assert free.ensure() == f"redis://127.0.0.1:{port}/0"
    finally:
        free.stop()
    assert services.seed_command("redis://127.0.0.1:6379/0", "scrapeme:start_urls") == "redis-cli lpush scrapeme:start_urls URL"
    assert services.seed_command("redis://:pw@10.1.2.3:6380/2", "k", "U") == "redis-cli -h 10.1.2.3 -p 6380 -n 2 --askpass lpush k U"
    assert services.seed_command("redis://10.0.0.5:7000", "k", cluster=True) == "redis-cli -c -h 10.0.0.5 -p 7000 lpush k URL"
    # how start-up lines name the Redis: never its password, "(embedded)" only for the embedded one
    configured = Settings({"REDIS_URL": "redis://:s3cret@10.1.2.3:6380/2"})
    assert redis_shown(configured, configured["REDIS_URL"], False) == "Redis redis://:***@10.1.2.3:6380/2"
    assert redis_shown(Settings(), "redis://127.0.0.1:6379/0", False) == "Redis redis://127.0.0.1:6379/0 (embedded)"
    assert redis_shown(Settings(), "redis://:s3cret@10.0.0.5:7000", True) == "Redis Cluster redis://:***@10.0.0.5:7000"
    assert services.services(tmp_path)[0].standard_port == 6379 and services.services(tmp_path)[1].standard_port == 27017


def test_genspider_template_makes_a_working_spider(tmp_path, env):
    project = tmp_path / "project"
    project.mkdir()
    shutil.copy(ROOT / "scrapy.cfg", project)
    shutil.copytree(ROOT / "spiders", project / "spiders", ignore=shutil.ignore_patterns("__pycache__"))
    env = dict(env, PYTHONPATH=str(ROOT))
    made = run([*SCRAPY, "genspider", "-t", "crawlhub", "books", "books.example"], env, cwd=project)
    assert made.returncode == 0, made.stderr
    source = (project / "spiders" / "books.py").read_text()
    assert "class BooksSpider(CrawlhubSpider)" in source and 'name = "books"' in source
    assert len([line for line in source.splitlines() if line.strip()]) <= 20
    listed = run([*SCRAPY, "list"], env, cwd=project)
    assert listed.stdout.split() == ["books", "generic", "quotes", "quotes_auto", "quotes_js", "scrapeme"], listed.stderr
