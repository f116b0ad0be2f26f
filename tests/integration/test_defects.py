"""Integration: the defects found running crawlhub as a new user would (real workers, local sites)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from collections import Counter

import pymongo
import redis

from tests.harness import ROOT, SCRAPY, cli, redis_with_password, run_workers, start_worker

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
    assert "Storing items in MongoDB" not in shell.stderr, "the shell stores nothing, and says nothing of storing"
    assert redis_client.keys("*") == [], "check and shell never write to the shared Redis"


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


def redirect(to: str, status: int = 301):
    return (status, "text/html", "", {"Location": to})


def test_redirects_end_every_lease(env, site, redis_client, mongo_db, tmp_path):
    """301/302/308 hand the lease over (each page once); too many hops, a loop and a hop off
    the seed's host end in the DLQ or are dropped and counted; the worker drains and exits."""
    pages = {
        "/": html("home", "/moved", "/temp", "/perm", "/chain/0", "/loop/a", "/away"),
        "/moved": redirect("/new", 301), "/temp": redirect("/new-temp", 302), "/perm": redirect("/new-perm", 308),
        "/new": html("new"), "/new-temp": html("new temp"), "/new-perm": html("new perm"),
        "/loop/a": redirect("/loop/b", 302), "/loop/b": redirect("/loop/a", 302),
    }
    pages.update({f"/chain/{i}": redirect(f"/chain/{i + 1}", 302) for i in range(30)})
    shop = site(pages)
    shop.pages["/away"] = redirect(f"http://localhost:{shop.port}/elsewhere", 302)
    shop.pages["/elsewhere"] = html("elsewhere")
    # the seed itself moved to another host: the crawl follows its new host
    redis_client.lpush("generic:start_urls", f"http://localhost:{shop.port}/start")
    shop.pages["/start"] = redirect(f"{shop.url}/", 301)
    (worker,) = run_workers("generic", env, tmp_path, 1, timeout=180)
    log = worker.log()
    stored = sorted(d["url"].removeprefix(shop.url) for d in mongo_db.pages.find())
    assert stored == ["/", "/new", "/new-perm", "/new-temp"], log[-3000:]
    fetched = shop.fetched("/")
    assert all(n == 1 for n in Counter(fetched).values()), Counter(fetched)
    letters = {json.loads(r)["url"].removeprefix(shop.url): json.loads(r) for r in redis_client.lrange("generic:dlq", 0, -1)}
    assert set(letters) == {"/chain/20", "/loop/b"}, letters  # REDIRECT_MAX_TIMES = 20 hops
    assert "max redirections reached (20)" in letters["/chain/20"]["error"]
    assert letters["/loop/b"]["error"].startswith("redirect loop:") and letters["/loop/b"]["error"].endswith("/loop/a")
    assert "/elsewhere" not in fetched and "not on the seed's host" in log and "'redirect/offsite': 1" in log
    assert redis_client.zcard("generic:inflight") == 0


def test_unreachable_host_ends_in_the_dlq(env, redis_client, tmp_path):
    """Connection refused on robots.txt: bounded waits, then the DLQ with the reason; the worker exits."""
    redis_client.lpush("generic:start_urls", "http://127.0.0.1:1/")
    (worker,) = run_workers("generic", env, tmp_path, 1, timeout=120, ROBOTSTXT_ERROR_RETRY=1,
                            ROBOTSTXT_UNAVAILABLE_MAX_WAITS=2)
    (letter,) = [json.loads(r) for r in redis_client.lrange("generic:dlq", 0, -1)]
    assert letter["url"] == "http://127.0.0.1:1/"
    assert letter["error"].startswith("robots.txt of http://127.0.0.1:1 unavailable (") and "2 times" in letter["error"]
    assert worker.log().count("Postponed http://127.0.0.1:1/") == 2
    assert redis_client.zcard("generic:inflight") == 0 and redis_client.zcard("generic:delayed") == 0


def test_a_document_mongodb_refuses_is_quarantined_and_the_batch_acked(env, site, redis_client, mongo_db, tmp_path):
    huge = "x" * (17 * 1024 * 1024)
    shop = site({"/": html("home", "/big", "/small"), "/big": html(huge), "/small": html("small")})
    # no cap at clean time: MongoDB itself refuses the 17 MB document
    redis_client.lpush("generic:start_urls", f"{shop.url}/")
    (worker,) = run_workers("generic", env, tmp_path, 1, timeout=180, ITEM_FIELD_MAX_CHARS=0)
    assert sorted(d["url"] for d in mongo_db.pages.find()) == [f"{shop.url}/", f"{shop.url}/small"], worker.log()[-3000:]
    (refused,) = mongo_db.quarantine.find()
    assert refused["source_url"] == f"{shop.url}/big" and refused["spider"] == "generic"
    reason = refused["reasons"][0]  # said by the driver (DocumentTooLarge) or by the server (a write error)
    assert "over MongoDB's limit" in reason or "larger than 16777216" in reason, reason
    assert refused["item"]["title"].endswith(f"({len(huge)} in all)") and len(refused["item"]["title"]) < 2000
    assert redis_client.zcard("generic:inflight") == 0, "every lease of the batch is acked"
    assert "MongoDB refused a pages item" in worker.log() and "unreachable" not in worker.log()

    # with the default cap the field is cut at clean time and the page stored
    mongo_db.pages.delete_many({})
    mongo_db.quarantine.delete_many({})
    redis_client.flushdb()
    redis_client.lpush("generic:start_urls", f"{shop.url}/")
    (worker,) = run_workers("generic", env, tmp_path / "capped", 1, timeout=180)
    big = mongo_db.pages.find_one({"url": f"{shop.url}/big"})
    assert big is not None and len(big["title"]) == 1_000_000, worker.log()[-3000:]
    assert mongo_db.quarantine.count_documents({}) == 0
    assert "ITEM_FIELD_MAX_CHARS" in worker.log() and "'items/truncated_fields': 1" in worker.log()


def demo(env, *args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "demo.run", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=300)


def test_demo_touches_only_what_it_created(env, redis_url, mongo_uri, redis_client, mongo_db, tmp_path):
    """A user's real crawl (here: this test's Redis database 0 and MongoDB database) survives `make demo`."""
    mongo_db.products.insert_one({"site": "real.example", "id": "1", "name": "a real product"})
    redis_client.lpush("scrapeme:start_urls", "https://real.example/")
    env = {**env, "MONGO_DATABASE": mongo_db.name, "CRAWLHUB_HOME": str(tmp_path / "home")}

    refused = demo(env)
    assert refused.returncode == 2 and "REDIS_URL and MONGO_URI are set" in refused.stderr, refused.stderr
    assert "--use-configured-servers" in refused.stderr

    foreign = redis_client.connection_pool.connection_kwargs.copy()
    db15 = redis.Redis(host=foreign["host"], port=foreign["port"], db=15)
    db15.flushdb()
    db15.set("somebody:else", "1")  # Redis database 15 is in use by someone else: refused, untouched
    refused = demo(env, "--use-configured-servers")
    assert refused.returncode == 2 and "Redis database 15 holds 1 keys that the demo did not create" in refused.stderr
    assert db15.get("somebody:else") == b"1"
    db15.flushdb()

    done = demo(env, "--use-configured-servers", "--products", "48", "--workers", "2", "--delay", "0")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "products stored     48 (the shop has 48)" in done.stdout and "duplicates          0" in done.stdout
    assert "Seeding: redis-cli" in done.stdout and "-n 15 lpush scrapeme:start_urls" in done.stdout
    assert "MONGO_DATABASE=crawlhub_demo .venv/bin/crawlhub status scrapeme" in done.stdout
    again = demo(env, "--use-configured-servers", "--products", "24", "--workers", "1", "--delay", "0")
    assert again.returncode == 0 and "products stored     24 (the shop has 24)" in again.stdout, again.stdout[-3000:]
    # the export line it prints gets what it stored
    assert "MONGO_DATABASE=crawlhub_demo .venv/bin/crawlhub export scrapeme -o products.csv" in again.stdout
    exported = cli({**env, "MONGO_DATABASE": "crawlhub_demo"}, "export", "scrapeme", "-t", "csv")
    assert exported.returncode == 0 and len(exported.stdout.splitlines()) == 1 + 24, exported.stderr
    # the real crawl's data: untouched
    assert [d["name"] for d in mongo_db.products.find()] == ["a real product"]
    assert redis_client.lrange("scrapeme:start_urls", 0, -1) == [b"https://real.example/"]
    assert db15.exists("crawlhub:demo") and db15.llen("scrapeme:start_urls") == 0
    pymongo.MongoClient(mongo_uri).drop_database("crawlhub_demo")
    db15.flushdb()


def test_a_worker_with_other_dupefilter_settings_is_refused_at_start(env, site, redis_client, tmp_path):
    shop = site({"/": html("home")})
    redis_client.lpush("generic:start_urls", f"{shop.url}/")
    run_workers("generic", env, tmp_path, 1)
    other = scrapy({**env, "DUPEFILTER_BUCKETS": "64"}, "crawl", "generic")
    assert other.returncode == 2, other.stderr[-3000:]
    last = other.stderr.strip().splitlines()[-1]
    assert last.startswith("crawlhub: the duplicate filter generic:dupefilter was made with") and "64" in last


def test_non_utf8_pages_and_non_ascii_urls(env, site, redis_client, mongo_db, tmp_path):
    cp1252 = ('<html><head><title>Café Crème – 5 €</title></head><body>'
              '<a href="/café/über?q=naïve">unicode link</a><a href="/latin">latin-1</a><a href="/broken">broken</a>'
              '</body></html>').encode("cp1252")
    latin = '<html><head><meta charset="iso-8859-1"><title>Ærø Ø</title></head></html>'.encode("latin-1")
    broken = b"<html><head><title>bad \xff\xfe bytes</title></head></html>"  # declared UTF-8, is not
    shop = site({
        "/": (200, "text/html; charset=windows-1252", cp1252, {}),
        # as browsers do: the path in UTF-8, the query in the page's own encoding
        "/caf%C3%A9/%C3%BCber?q=na%EFve": html("Über naïve"),
        "/latin": (200, "text/html", latin, {}),
        "/broken": (200, "text/html; charset=utf-8", broken, {}),
    })
    redis_client.lpush("generic:start_urls", f"{shop.url}/")
    (worker,) = run_workers("generic", env, tmp_path, 1)
    titles = {d["url"].removeprefix(shop.url): d["title"] for d in mongo_db.pages.find()}
    assert titles == {
        "/": "Café Crème – 5 €",
        "/caf%C3%A9/%C3%BCber?q=na%EFve": "Über naïve",
        "/latin": "Ærø Ø",
        "/broken": "bad \ufffd\ufffd bytes",
    }, worker.log()[-3000:]
    assert Counter(shop.fetched("/")) == dict.fromkeys(titles, 1), "each page once"
    assert redis_client.llen("generic:dlq") == 0


def test_an_oversized_page_goes_to_the_dlq_with_the_reason(env, site, redis_client, mongo_db, tmp_path):
    shop = site({"/": html("home", "/huge", "/fine"), "/huge": html("x" * (3 * 1024 * 1024)), "/fine": html("fine")})
    redis_client.lpush("generic:start_urls", f"{shop.url}/")
    (worker,) = run_workers("generic", env, tmp_path, 1, DOWNLOAD_MAXSIZE=1024 * 1024)
    assert sorted(d["url"] for d in mongo_db.pages.find()) == [f"{shop.url}/", f"{shop.url}/fine"]
    (letter,) = [json.loads(r) for r in redis_client.lrange("generic:dlq", 0, -1)]
    assert letter["url"] == f"{shop.url}/huge" and "larger than download max size" in letter["error"], letter["error"]
    assert redis_client.zcard("generic:inflight") == 0
    assert "Traceback" not in worker.log(), "the dead-letter line says it all: no traceback after it"


def test_a_lease_that_keeps_expiring_reaches_the_dlq(env, site, redis_client, tmp_path):
    """A page whose worker dies every time (here: kill -9 while it hangs) ends in the DLQ after LEASE_MAX_EXPIRIES."""
    shop = site({"/": html("home", "/poison"), "/poison": html("never")})
    arrived = []  # the site's access log records a hit when it is answered: never, here

    def hang(site_, path):
        if path == "/poison":
            arrived.append(time.time())
            time.sleep(60)
        return None

    shop.handler = hang
    redis_client.lpush("generic:start_urls", f"{shop.url}/")
    fast = {"LEASE_TTL": 2, "LEASE_RECLAIM_INTERVAL": 1, "LEASE_MAX_EXPIRIES": 2, "RETRY_TIMES": 5}
    kills = 0
    while not redis_client.llen("generic:dlq"):
        assert kills <= 3, f"no DLQ entry after {kills} kills"
        worker = start_worker("generic", env, tmp_path, f"w{kills}", **fast)
        deadline = time.monotonic() + 30
        while len(arrived) <= kills and not redis_client.llen("generic:dlq"):
            assert time.monotonic() < deadline, worker.log()[-3000:]
            time.sleep(0.1)
        if redis_client.llen("generic:dlq"):
            break
        time.sleep(1.5)  # the other pages' leases end (items stored, acked); the poison page's cannot
        worker.kill()  # dies holding the lease
        kills += 1
    letters = [json.loads(r) for r in redis_client.lrange("generic:dlq", 0, -1)]
    assert [(d["url"], d["error"][:21]) for d in letters] == [(f"{shop.url}/poison", "lease expired 3 times")], letters
    assert kills == 3 and len(arrived) == 3
    worker.kill()


def test_a_stopped_worker_does_not_count_its_sleep_as_idle_time(env, redis_client, tmp_path):
    """SIGSTOP for 20 s, then SIGCONT: the idle timer starts again; the worker does not close at once."""
    import signal

    worker = start_worker("generic", env, tmp_path, "sleeper", MAX_IDLE_TIME_BEFORE_CLOSE=8)
    deadline = time.monotonic() + 30
    while "Reading seeds from Redis key" not in worker.log():
        assert time.monotonic() < deadline, worker.log()[-3000:]
        time.sleep(0.2)
    worker.proc.send_signal(signal.SIGSTOP)
    time.sleep(20)
    worker.proc.send_signal(signal.SIGCONT)
    resumed = time.monotonic()
    assert worker.wait(60) == 0
    assert time.monotonic() - resumed >= 6, "it closed as if its 20 s asleep had been idle time"
    closing = [line for line in worker.log().splitlines() if "frontier has been empty for" in line]
    assert closing and all(int(line.split("empty for ")[1].split("s")[0]) < 20 for line in closing), closing


def test_an_unmodified_scrapy_redis_spider_runs_on_the_frontier(env, site, redis_client, mongo_db, tmp_path):
    shop = site({"/": html("home", "/a"), "/a": html("a")})
    redis_client.lpush("t_plain_redis:start_urls", f"{shop.url}/")
    (worker,) = run_workers("t_plain_redis", {**env, "SPIDER_MODULES": TEST_SPIDERS}, tmp_path, 1)
    assert sorted(d["title"] for d in mongo_db.pages.find()) == ["a", "home"], worker.log()[-3000:]
    assert Counter(shop.fetched("/")) == {"/": 1, "/a": 1}


def test_an_unmodified_scrapy_redis_crawl_spider_shares_its_rules_requests(env, site, redis_client, mongo_db, tmp_path):
    """A CrawlSpider's rules send every link to its private _callback/_errback: those requests cross Redis
    too (two workers share them), none is kept in one worker's memory or refused by the other."""
    lists = [f"/list/{n}" for n in range(4)]
    items = [f"/item/{n}" for n in range(12)]
    pages = {"/": html("home", *lists)}
    pages.update({path: html(path, *items[n * 3:n * 3 + 3], *lists) for n, path in enumerate(lists)})
    pages.update({path: html(path, "/") for path in items})
    shop = site(pages)
    redis_client.lpush("t_plain_redis_crawl:start_urls", f"{shop.url}/")
    workers = run_workers("t_plain_redis_crawl", {**env, "SPIDER_MODULES": TEST_SPIDERS}, tmp_path, 2)
    logs = "".join(worker.log() for worker in workers)
    assert sorted(d["title"] for d in mongo_db.pages.find()) == sorted(items), logs[-3000:]
    assert "cannot be stored as JSON" not in logs and "set aside" not in logs, logs[-3000:]
    assert Counter(shop.fetched("/")) == dict.fromkeys(["/", *lists, *items], 1)


def test_make_shop_serves_the_demo_shop_on_a_free_port_when_its_own_is_taken(tmp_path):
    """`make shop` (README, "Run a crawl"): the demo's shop to crawl by hand, with the seed command for its URL,
    on another port when 8800's is taken, stopped by SIGTERM."""
    import socket
    import urllib.request

    from tests.harness import wait_for

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        out = tmp_path / "shop.out"
        with out.open("w") as sink:
            shop = subprocess.Popen([sys.executable, "-m", "demo.shop", "--port", str(port), "--products", "24"],
                                    cwd=ROOT, stdout=sink, stderr=subprocess.STDOUT, text=True)
        try:
            line = wait_for(lambda: next((ln for ln in out.read_text().splitlines()
                                          if ln.startswith("seed a crawl with: crawlhub seed scrapeme ")), None), 30)
            assert line, out.read_text()
            url = line.split()[7]
            assert url.startswith("http://127.0.0.1:") and url.endswith("/shop/") and f":{port}/" not in url
            assert f"port {port} is taken" in out.read_text()
            page = urllib.request.urlopen(url, timeout=10).read().decode()
            assert "ScrapeMe" in page and "product" in page
        finally:
            shop.terminate()
            assert shop.wait(timeout=30) == 0
