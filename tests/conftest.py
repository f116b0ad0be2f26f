"""Fixtures: one real redis-server and one real secantusd-py per test session,
each on a free loopback port, started and stopped by the tests (through
crawlhub's own service classes). Each test gets an empty Redis database and
its own MongoDB database."""

from __future__ import annotations

import fcntl
import itertools
import json
import os
import tempfile

import pymongo
import pytest
import redis
from scrapy.exceptions import NotConfigured
from scrapy.settings import Settings

from crawlhub.browser import chromium_path
from crawlhub.services import EmbeddedMongo, EmbeddedRedis
from tests import harness
from tests.harness import crawl_env
from tests.sites.server import LocalSite

_db_names = itertools.count()


@pytest.fixture(scope="session", autouse=True)
def no_server_left_in_the_checkout():
    """The suite never starts the checkout's own embedded servers (.crawlhub/, what `make demo` and a
    user's crawls use): each test names its servers. One a test started anyway is stopped here, and the
    run fails saying so (a test that reached for the embedded default, or code that starts one it must not)."""
    home = harness.ROOT / ".crawlhub"
    before = {service.name: service.pid for service in (EmbeddedRedis(home), EmbeddedMongo(home)) if service.running()}
    yield
    started = [service for service in (EmbeddedRedis(home), EmbeddedMongo(home))
               if service.running() and before.get(service.name) != service.pid]
    for service in started:
        service.stop()
    assert not started, (f"the tests started the checkout's embedded {', '.join(s.name for s in started)} "
                         f"in {home} (stopped now): a test must name its own servers")


@pytest.fixture(scope="session")
def services_home(tmp_path_factory):
    return tmp_path_factory.mktemp("services")


@pytest.fixture(scope="session")
def redis_server(services_home):
    server = EmbeddedRedis(services_home)
    server.ensure()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def redis_url(redis_server):
    return redis_server.url()


@pytest.fixture(scope="session")
def mongo_server(services_home):
    server = EmbeddedMongo(services_home)
    server.ensure()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def mongo_uri(mongo_server):
    return mongo_server.url()


@pytest.fixture
def redis_client(redis_url):
    client = redis.Redis.from_url(redis_url)
    client.flushdb()
    yield client
    client.close()


@pytest.fixture
def mongo_db(mongo_uri):
    client = pymongo.MongoClient(mongo_uri, serverSelectionTimeoutMS=10000)
    name = f"test_{next(_db_names)}"
    client.drop_database(name)
    yield client[name]
    client.drop_database(name)
    client.close()


@pytest.fixture
def env(redis_url, mongo_uri, mongo_db, redis_client, tmp_path):
    """Environment for `scrapy crawl` workers on this test's Redis and MongoDB."""
    return crawl_env(redis_url, mongo_uri, mongo_db.name, tmp_path / "home")


@pytest.fixture
def site():
    """Start a LocalSite: site(pages, delay=...)."""
    started = []

    def make(pages, **kwargs):
        s = LocalSite(pages, **kwargs).start()
        started.append(s)
        return s

    yield make
    for s in started:
        s.stop()


@pytest.fixture
def chromium():
    """The Chromium the browser spiders will launch. Missing, the test fails (CI must not pass with the
    browser untested) unless CRAWLHUB_SKIP_BROWSER_TESTS=1 says to skip the browser tests on purpose."""
    try:
        return chromium_path(Settings())
    except NotConfigured as exc:
        if os.environ.get("CRAWLHUB_SKIP_BROWSER_TESTS") == "1":
            pytest.skip(f"CRAWLHUB_SKIP_BROWSER_TESTS=1: {exc}")
        pytest.fail(f"the browser tests cannot run: {exc}. Set CRAWLHUB_SKIP_BROWSER_TESTS=1 to skip them on purpose")


@pytest.fixture(autouse=True)
def alone_when_marked(request):
    """A test marked ``alone`` (timings asserted: a rate limit's pace, latencies) runs with no other test of the
    run beside it; every other test runs beside any other. Two file locks shared by the run's xdist processes:
    ``main``, held shared by each test and exclusively by an ``alone`` one, and ``gate``, which an ``alone`` test
    holds while it waits for ``main``, so that no new test starts meanwhile and it is not kept waiting for ever."""
    run = getattr(request.config, "workerinput", {}).get("testrunuid")
    if run is None:  # not under xdist: nothing runs beside it anyway
        yield
        return
    base = os.path.join(tempfile.gettempdir(), f"crawlhub-tests-{run}")
    with open(f"{base}.gate", "a+") as gate, open(f"{base}.main", "a+") as main:
        fcntl.flock(gate, fcntl.LOCK_EX)
        try:
            fcntl.flock(main, fcntl.LOCK_EX if request.node.get_closest_marker("alone") else fcntl.LOCK_SH)
        finally:
            fcntl.flock(gate, fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(main, fcntl.LOCK_UN)


@pytest.fixture(autouse=True)
def reap_workers():
    yield
    while harness.STARTED:
        harness.STARTED.pop().kill()


class WebhookReceiver:
    """A local webhook endpoint: records every POST's JSON body; answers 503 to the first ``fail_first``."""

    def __init__(self, fail_first: int = 0):
        import http.server
        import threading

        self.bodies: list[dict] = []
        self.attempts = 0
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                receiver.attempts += 1
                if receiver.attempts <= fail_first:
                    self.send_response(503)
                else:
                    receiver.bodies.append(json.loads(body))
                    self.send_response(204)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def events(self) -> list[dict]:
        return [event for body in self.bodies for event in body.get("events", ())]


@pytest.fixture
def webhook():
    """A local webhook receiver (``.url``, ``.events()``); its first POST is answered 503 (the worker retries)."""
    receiver = WebhookReceiver(fail_first=1)
    yield receiver
    receiver.server.shutdown()


# -- the order the tests start in ------------------------------------------------------------------------------
# Under pytest-xdist the integration tests are handed out in collection order, one at a time (`make test`:
# --maxschedchunk 1). The longest start first, so that none of them is the one left running alone at the end
# (longest processing time first: a run ends within the longest test of the mean load per process). What each
# took is in tests/durations.json (`make durations` writes it anew); a test not in it counts as DEFAULT_SECONDS.
DURATIONS = harness.ROOT / "tests" / "durations.json"
DEFAULT_SECONDS = 5.0


def pytest_addoption(parser):
    parser.addoption("--record-durations", metavar="PATH", default=None,
                     help="write each test's seconds (setup, call and teardown) to PATH as JSON, for the order "
                          "the tests start in (tests/durations.json)")


def pytest_collection_modifyitems(config, items):
    if not (hasattr(config, "workerinput") and DURATIONS.exists()):
        return  # (one process: the order changes nothing)
    took = json.loads(DURATIONS.read_text())
    items.sort(key=lambda item: -took.get(item.nodeid, DEFAULT_SECONDS))  # (stable: ties keep their order)


def pytest_configure(config):
    path = config.getoption("--record-durations")
    if path and not hasattr(config, "workerinput"):  # (the controller: every process's reports reach it)
        config.pluginmanager.register(DurationRecorder(path), "crawlhub-durations")


class DurationRecorder:
    def __init__(self, path: str) -> None:
        self.path, self.took = path, {}

    def pytest_runtest_logreport(self, report):
        self.took[report.nodeid] = round(self.took.get(report.nodeid, 0.0) + report.duration, 1)

    def pytest_sessionfinish(self, session):
        with open(self.path, "w") as out:
            json.dump(dict(sorted(self.took.items(), key=lambda kv: -kv[1])), out, indent=0)
            out.write("\n")
