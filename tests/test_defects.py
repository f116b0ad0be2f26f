"""Integration: the defects found running crawlhub as a new user would (real workers, local sites)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from contextlib import contextmanager

from crawlhub.services import free_port, port_open, redis_server_binary

from tests.harness import ROOT, SCRAPY, run_workers

TEST_SPIDERS = "spiders,tests.sites.spiders"


def html(title: str, *links: str) -> str:
    anchors = "".join(f'<a href="{href}">{href}</a>' for href in links)
    return f"<!DOCTYPE html><html><head><title>{title}</title></head><body>{anchors}</body></html>"


def scrapy(env, *args, timeout=120) -> subprocess.CompletedProcess:
    return subprocess.run([*SCRAPY, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


def test_requests_with_lambda_callbacks_are_crawled_not_lost(env, site, redis_client, mongo_db, tmp_path):
    shop = site({"/": html("home", "/a", "/b"), "/a": html("a"), "/b": html("b")})
    env = {**env, "SPIDER_MODULES": TEST_SPIDERS}
    redis_client.lpush("t_lambda:start_urls", f"{shop.url}/")
    (worker,) = run_workers("t_lambda", env, tmp_path, 1)
    log = worker.log()
    assert sorted(d["url"] for d in mongo_db.pages.find()) == [f"{shop.url}/", f"{shop.url}/a", f"{shop.url}/b"], log[-3000:]
    assert "cannot be stored as JSON" in log and "use a method of the spider" in log
    assert "never retrieved" not in log and "Traceback" not in log


CONTRACT_SPIDER = '''
from crawlhub.items import Page
from crawlhub.spider import CrawlhubSpider


class ContractSpider(CrawlhubSpider):
    name = "t_contract"

    def parse(self, response):
        """The home page: one Page.

        @url {url}/
        @returns items {low} {high}
        @returns requests 0 0
        """
        yield Page(url=response.url, status=response.status, source_url=response.url)
'''


def test_scrapy_check_runs_contracts_and_shell_stays_off_the_frontier(env, site, redis_client, tmp_path):
    shop = site({"/": html("home")})
    for name, low, high, code in (("good", 1, 1, 0), ("bad", 2, 2, 1)):
        package = tmp_path / name / f"contracts_{name}"
        package.mkdir(parents=True)
        (package / "__init__.py").write_text("")
        (package / "spider.py").write_text(textwrap.dedent(CONTRACT_SPIDER).format(url=shop.url, low=low, high=high))
        run_env = {**env, "PYTHONPATH": f"{tmp_path / name}:{ROOT}", "SPIDER_MODULES": f"contracts_{name}"}
        done = scrapy(run_env, "check", "t_contract")
        out = done.stdout + done.stderr
        assert "Ran 2 contracts" in out, out
        assert done.returncode == code, out
    shell = scrapy(env, "shell", f"{shop.url}/", "-c", "response.status")
    assert shell.returncode == 0 and shell.stdout.strip() == "200", shell.stderr[-3000:]
    assert "cannot be stored as JSON" not in shell.stderr
    assert redis_client.keys("*") == [], "check and shell never write to the shared Redis"


@contextmanager
def redis_with_password(password: str):
    port = free_port()
    proc = subprocess.Popen([redis_server_binary(), "--port", str(port), "--bind", "127.0.0.1", "--requirepass", password,
                             "--save", "", "--appendonly", "no"], stdout=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while not port_open(port) and time.monotonic() < deadline:
            time.sleep(0.05)
        yield port
    finally:
        proc.kill()
        proc.wait()


def test_dead_redis_or_wrong_password_is_one_clear_line(env, tmp_path):
    with redis_with_password("the-right-one") as port:
        cases = (
            ("redis://:s3cretpw@127.0.0.1:1/0", "cannot reach Redis at redis://:***@127.0.0.1:1/0", 60),
            (f"redis://:s3cretpw@127.0.0.1:{port}/0", "refused the credentials", 3600),
        )
        for url, said, wait in cases:
            started = time.monotonic()
            done = scrapy({**env, "REDIS_URL": url, "REDIS_STARTUP_WAIT": "2" if wait == 60 else str(wait)},
                          "crawl", "scrapeme", timeout=60)
            assert done.returncode == 2, done.stderr[-3000:]
            last = done.stderr.strip().splitlines()[-1]
            assert last.startswith("crawlhub: ") and said in last, done.stderr[-3000:]
            assert "Traceback" not in done.stderr and "s3cretpw" not in done.stderr + done.stdout
            assert time.monotonic() - started < 30, "an authentication error is final at once"

        done = scrapy({**env, "REDIS_URL": url, "REDIS_STARTUP_WAIT": "2"}, "crawl", "scrapeme", timeout=60)
        assert done.returncode == 2, done.stderr[-3000:]
        last = done.stderr.strip().splitlines()[-1]
        assert last.startswith("crawlhub: ") and said in last, done.stderr[-3000:]
        assert "Traceback" not in done.stderr and "s3cretpw" not in done.stderr + done.stdout
