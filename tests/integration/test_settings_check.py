"""A bad value of any setting, given in the environment or with `-s`, and a spider the project does not have, as a
user types them (issue #67): `scrapy crawl` says so in one line naming the setting (or the spider and the project's
spiders), exits 2 with no traceback, and starts nothing: no connection to the crawl's Redis, no key written there,
no embedded server made. `crawlhub` commands refuse a bad environment setting the same way."""

from __future__ import annotations

import json
import subprocess

from tests.harness import ROOT, SCRAPY, cli

PASSWORD = "hunter2"  # in the bad values below: never shown

# (kind, the crawl's arguments after the spider, the environment's additions, the setting the line must name)
CASES = [
    ("number", ["-s", "DOWNLOAD_TIMEOUT=0"], {}, "DOWNLOAD_TIMEOUT"),
    ("number", [], {"MONGO_BATCH_SIZE": "0"}, "MONGO_BATCH_SIZE"),
    ("boolean", ["-s", "ROBOTSTXT_OBEY=maybe"], {}, "ROBOTSTXT_OBEY"),
    ("duration", [], {"REVISIT_GONE_DELAY": "10x"}, "REVISIT_GONE_DELAY"),
    ("duration", ["-s", "REVISIT_MIN_INTERVAL=soon"], {}, "REVISIT_MIN_INTERVAL"),
    ("rate", [], {"DOMAIN_RATE": "fast"}, "DOMAIN_RATE"),
    ("rate", ["-s", "DOMAIN_RATE=fast"], {}, "DOMAIN_RATE"),
    ("JSON map", ["-s", 'DOMAIN_LIMITS={"x.com":"fast"}'], {}, "DOMAIN_LIMITS"),
    ("JSON map", [], {"PROXY_POOLS": json.dumps({"dc": [f"ftp://user:{PASSWORD}@10.0.0.1:21"]})}, "PROXY_POOLS"),
    ("choice", [], {"DUPEFILTER_MODE": "fuzzy"}, "DUPEFILTER_MODE"),
    ("choice", ["-s", "WORKER_CAPABILITIES=plain,gpu"], {}, "WORKER_CAPABILITIES"),
    ("status codes", ["-s", "RETRY_HTTP_CODES=500,5xx"], {}, "RETRY_HTTP_CODES"),
    ("URL", [], {"REDIS_URL": f"redis://:{PASSWORD}@127.0.0.1:99999/0"}, "REDIS_URL"),
]


def scrapy(env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*SCRAPY, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)


def connections(redis_client) -> int:
    """Connections the test's Redis has taken so far (this client's own, already open, is not one more)."""
    return int(redis_client.info("stats")["total_connections_received"])


def refused_in_one_line(done: subprocess.CompletedProcess, said: str) -> str:
    """``done`` exited 2 with one line of crawlhub's that holds ``said``, and no traceback: that line."""
    lines = [line for line in done.stderr.splitlines() if line.startswith("crawlhub:")]
    assert done.returncode == 2 and len(lines) == 1 and said in lines[0], (done.returncode, done.stderr[-3000:])
    assert "Traceback" not in done.stderr + done.stdout, done.stderr[-3000:]
    assert "Spider opened" not in done.stderr and PASSWORD not in done.stderr + done.stdout, done.stderr[-3000:]
    return lines[0]


def test_a_bad_value_of_each_kind_stops_the_worker_in_one_line_before_anything_starts(env, redis_client):
    before = connections(redis_client)
    for kind, args, extra, name in CASES:
        done = scrapy({**env, **extra}, "crawl", "scrapeme", *args)
        line = refused_in_one_line(done, name)
        assert ("environment variable" if extra else "setting") in line, (kind, line)
        assert connections(redis_client) == before, f"{kind} ({name}): the worker connected to Redis first"
    assert redis_client.dbsize() == 0, "no worker record, no seed, no key of any kind"


def test_nothing_embedded_is_started_for_a_bad_value(env, tmp_path):
    """With REDIS_URL and MONGO_URI unset a worker starts the embedded servers under CRAWLHUB_HOME: not when it
    refuses its settings."""
    home = tmp_path / "embedded"
    local = {k: v for k, v in env.items() if k not in ("REDIS_URL", "MONGO_URI")} | {"CRAWLHUB_HOME": str(home)}
    try:
        refused_in_one_line(scrapy({**local, "DOMAIN_RATE": "fast"}, "crawl", "scrapeme"), "DOMAIN_RATE")
        refused_in_one_line(scrapy(local, "crawl", "scrapeme", "-s", 'DOMAIN_LIMITS={"x.com":"fast"}'),
                            "DOMAIN_LIMITS")
        assert not home.exists(), f"made {sorted(p.name for p in home.iterdir())}"
    finally:
        if home.exists():  # (the feature broken: stop what it started)
            cli(local, "services", "down")


def test_an_unknown_spider_is_named_with_the_projects_spiders(env, redis_client):
    spiders = scrapy(env, "list").stdout.split()
    assert {"scrapeme", "quotes", "generic"} <= set(spiders)
    before = connections(redis_client)
    line = refused_in_one_line(scrapy(env, "crawl", "nosuch"), "unknown spider 'nosuch'")
    assert line == f"crawlhub: unknown spider 'nosuch'; this project's spiders: {', '.join(sorted(spiders))}"
    assert connections(redis_client) == before and redis_client.dbsize() == 0


def test_the_crawlhub_command_refuses_a_bad_environment_setting_in_one_line(env, redis_client):
    before = connections(redis_client)
    for extra, name in (({"DOMAIN_RATE": "fast"}, "DOMAIN_RATE"), ({"DUPEFILTER_MODE": "fuzzy"}, "DUPEFILTER_MODE"),
                        ({"REVISIT_GONE_DELAY": "10x"}, "REVISIT_GONE_DELAY")):
        for args in (["status"], ["status", "scrapeme"], ["seed", "scrapeme", "https://127.0.0.1:1/"]):
            done = cli({**env, **extra}, *args)
            assert done.returncode == 2 and "Traceback" not in done.stderr, (args, done.stderr[-3000:])
            (line,) = done.stderr.strip().splitlines()
            assert line.startswith(f"Error: environment variable {name}="), (args, line)
    assert connections(redis_client) == before and redis_client.dbsize() == 0
