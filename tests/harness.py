"""Helpers for integration tests: real `scrapy crawl` worker processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRAPY = [sys.executable, "-m", "scrapy"]
# every worker a test starts; conftest kills what is left after each test, so a
# failed test cannot leave a worker crawling into the next one
STARTED: list[Worker] = []


@dataclass
class Worker:
    name: str
    proc: subprocess.Popen
    log_path: Path

    def wait(self, timeout: float) -> int:
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(f"worker {self.name} did not finish in {timeout}s; log:\n{self.log()[-4000:]}") from None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def start_worker(spider: str, env: dict, logdir: Path, name: str, cwd: Path = ROOT, python: str | None = None,
                 **settings) -> Worker:
    """A ``scrapy crawl`` process (``python``: another environment's interpreter than the suite's)."""
    cmd = [*([python, "-m", "scrapy"] if python else SCRAPY), "crawl", spider]
    for key, value in settings.items():
        cmd += ["-s", f"{key}={value}"]
    logdir.mkdir(parents=True, exist_ok=True)
    log_path = logdir / f"{name}.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT)
    worker = Worker(name, proc, log_path)
    STARTED.append(worker)
    return worker


def run_workers(spider: str, env: dict, logdir: Path, count: int, timeout: float = 120, **settings) -> list[Worker]:
    workers = [start_worker(spider, env, logdir, f"{spider}-{i}", **settings) for i in range(count)]
    wait_all(workers, timeout)
    return workers


def wait_all(workers: list[Worker], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    try:
        for worker in workers:
            code = worker.wait(max(1.0, deadline - time.monotonic()))
            assert code == 0, f"worker {worker.name} exited {code}; log:\n{worker.log()[-4000:]}"
    finally:
        for worker in workers:
            worker.kill()


def wait_for(predicate, timeout: float, step: float = 0.2):
    """Poll ``predicate`` until it returns something true (returned) or ``timeout`` passes (its last value)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(step)
    return predicate()


def worker_records(redis_client, spider: str) -> list[dict]:
    return [json.loads(v) for v in redis_client.hgetall(f"{spider}:workers").values()]


def crawl_env(redis_url: str, mongo_uri: str, database: str, home: Path, **extra) -> dict:
    env = dict(os.environ)
    env.update(
        {
            "REDIS_URL": redis_url,
            "MONGO_URI": mongo_uri,
            "MONGO_DATABASE": database,
            "CRAWLHUB_HOME": str(home),
            "MAX_IDLE_TIME_BEFORE_CLOSE": "2",
            "MONGO_FLUSH_INTERVAL": "0.5",
            "PYTHONWARNINGS": "error::DeprecationWarning:scrapy_redis,default",
            # politeness is tested in test_politeness; elsewhere local sites go at full speed
            "DOMAIN_RATE": "0",
            "DOMAIN_CONCURRENCY": "0",
        }
    )
    env.update({k: str(v) for k, v in extra.items()})
    return env


def cli(env: dict, *args: str, input: str | None = None) -> subprocess.CompletedProcess:
    """Run the `crawlhub` command with `env`."""
    return subprocess.run([sys.executable, "-m", "crawlhub.cli", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60, input=input)


def start_ui(env: dict, tmp_path: Path, *args: str, token: str | None = None) -> tuple[Worker, str]:
    """`crawlhub ui` on a free port (reaped after the test like the workers); returns it and its base URL."""
    from tests.sites.server import refused_port

    port = refused_port()
    log_path = tmp_path / f"ui-{port}.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen([sys.executable, "-m", "crawlhub.cli", "ui", "--port", str(port), *args], cwd=ROOT,
                                env=env, stdout=log, stderr=subprocess.STDOUT)
    ui = Worker(f"ui-{port}", proc, log_path)
    STARTED.append(ui)
    base = f"http://127.0.0.1:{port}"
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    up = wait_for(lambda: proc.poll() is not None or http(base + "/api/spiders", headers=headers)[0] == 200, 30)
    assert up and proc.poll() is None, f"crawlhub ui did not come up; log:\n{ui.log()}"
    return ui, base


def http(url: str, data: dict | None = None, headers: dict | None = None) -> tuple[int, dict, bytes]:
    """(status, headers, body) of a GET, or of a POST of ``data`` as JSON; (0, {}, b"") if nothing answers."""
    body = json.dumps(data).encode() if data is not None else None
    request = urllib.request.Request(url, data=body, headers={**(headers or {}),
                                     **({"Content-Type": "application/json"} if body else {})})
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, dict(answer.headers), answer.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()
    except OSError:
        return 0, {}, b""


def queued(client, spider: str) -> int:
    """Requests waiting in SPIDER's per-domain queues."""
    return sum(int(n) for n in client.hvals(f"{spider}:queued"))


def seen(client, spider: str) -> int:
    """URLs SPIDER's duplicate filter took in."""
    from crawlhub.frontier.dupefilter import seen_count

    return seen_count(client, f"{spider}:dupefilter")


def all_redis_values(client) -> bytes:
    """Every key and value in Redis (streams included), as one blob to look for secrets in."""
    out = []
    for key in client.scan_iter(count=1000):
        kind = client.type(key)
        out.append(key)
        if kind == b"string":
            out.append(client.get(key) or b"")
        elif kind == b"hash":
            out += [x for kv in client.hgetall(key).items() for x in kv]
        elif kind == b"list":
            out += client.lrange(key, 0, -1)
        elif kind == b"set":
            out += list(client.smembers(key))
        elif kind == b"zset":
            out += client.zrange(key, 0, -1)
        elif kind == b"stream":
            out += [value for _, fields in client.xrange(key) for kv in fields.items() for value in kv]
        elif kind == b"none":
            continue  # gone since the scan (an expiring lock: the reclaim's, the refresher's): no value to read
        else:
            raise AssertionError(f"{key!r}: a Redis type this helper does not read: {kind!r}")
    return b"\n".join(out)


@contextmanager
def redis_with_password(password: str):
    """A throw-away redis-server (found the way crawlhub finds it) that requires ``password``; yields its port."""
    from crawlhub.services import free_port, port_open, redis_server_binary

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
