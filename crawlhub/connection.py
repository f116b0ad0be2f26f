"""Clients for the shared servers, built from settings.

REDIS_URL / MONGO_URI unset means the embedded local servers
(:mod:`crawlhub.services`), started on first use.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import redis
from redis._parsers.helpers import parse_command
from redis.backoff import ExponentialBackoff
from redis.cluster import ClusterNode, RedisCluster
from redis.connection import AbstractConnection, Connection, SSLConnection
from redis.exceptions import RedisClusterException
from redis.retry import Retry
from scrapy.settings import SETTINGS_PRIORITIES, BaseSettings
from scrapy.statscollectors import StatsCollector

from crawlhub import services
from crawlhub.config import redact_url

if TYPE_CHECKING:
    from pymongo import MongoClient

# What a Redis call raises when the server, or a cluster's nodes, cannot answer. redis-py's RedisClusterException
# ("Redis Cluster cannot be connected", a slot not covered while the cluster restarts) is not a RedisError: every
# "Redis is unavailable" path catches this tuple, so a cluster restarting is an outage like a server restarting.
REDIS_ERRORS: tuple[type[Exception], ...] = (redis.RedisError, RedisClusterException)

logger = logging.getLogger(__name__)
T = TypeVar("T")


def worker_id() -> str:
    """This worker's name in the shared state (leases, heartbeats, locks): host and process id."""
    return f"{socket.gethostname()}:{os.getpid()}"


class Unreachable(ConnectionError):
    """A shared server could not be reached; the message names it (password redacted)."""


class BadURL(ValueError):
    """REDIS_URL or MONGO_URI is not a URL of its server; the message names the setting (password redacted)."""


def mongo_error(exc: Exception) -> str:
    """A pymongo error in one line: its class and message without the topology description pymongo appends."""
    text = str(exc).splitlines()[0] if str(exc) else ""
    text = text.split(", Timeout: ")[0].split(", Topology Description: ")[0]
    return f"{type(exc).__name__}: {text[:300]}"

REDIS_PARAMS = {
    "socket_timeout": 30,
    "socket_connect_timeout": 10,
    "retry_on_timeout": True,
    "health_check_interval": 30,
}


CLUSTER_SCHEME = "redis+cluster"


def cluster_nodes(settings: BaseSettings) -> tuple[list[tuple[str, int]], str] | None:
    """The startup nodes and the URL they came from when the settings name a Redis Cluster, else None.

    REDIS_CLUSTER_NODES="host:port,host:port" (with REDIS_URL for the password, if any), or
    REDIS_URL=redis+cluster://[user:password@]host:port[,host:port...].
    """
    url = settings.get("REDIS_URL") or ""
    listed = settings.get("REDIS_CLUSTER_NODES") or ""
    if url.startswith(CLUSTER_SCHEME + "://"):
        rest = url[len(CLUSTER_SCHEME) + 3:]
        auth, _, hosts = rest.rpartition("@")
        listed = listed or hosts.split("/", 1)[0]
        url = f"redis://{auth + '@' if auth else ''}{hosts.split(',')[0]}"
    if not listed:
        return None
    nodes = []
    for part in str(listed).split(","):
        host, sep, port = part.strip().rpartition(":")
        if not sep or not port.isdigit():
            raise ValueError(f"REDIS_CLUSTER_NODES: {part.strip()!r} is not host:port")
        nodes.append((host.strip("[]") or "127.0.0.1", int(port)))
    return nodes, url or f"redis://{nodes[0][0]}:{nodes[0][1]}"


def redis_location(settings: BaseSettings) -> tuple[str, bool]:
    """The URL of the Redis the settings name (a cluster: its first node's) and whether it is a cluster.
    Only a single Redis with no REDIS_URL starts the embedded server: a cluster never does."""
    cluster = cluster_nodes(settings)
    return (cluster[1], True) if cluster else (services.redis_url(settings), False)


def redis_shown(settings: BaseSettings, url: str, cluster: bool) -> str:
    """How a start-up line names the Redis at ``url`` (from :func:`redis_location`), password hidden."""
    if cluster:
        return f"Redis Cluster {redact_url(url)}"
    return f"Redis {redact_url(url)}{'' if settings.get('REDIS_URL') else ' (embedded)'}"


# what `crawlhub seed` must be told when the worker was (it reads settings.py and the environment, not `-s`)
WHERE_REDIS_IS = ("REDIS_URL", "REDIS_CLUSTER_NODES", "CRAWLHUB_HOME", "EMBEDDED_REDIS_PORT")


def seed_commands(settings: BaseSettings, spider: str, key: str) -> str:
    """The commands that push a seed to the Redis these settings reach (a worker's last start-up line says
    them): ``crawlhub seed SPIDER URL``, then the ``redis-cli`` line for the server's own port and database
    (``--askpass`` for a password, never shown). A setting given to the worker with ``-s`` (which the
    ``crawlhub`` command does not read) goes in front, its password redacted."""
    cluster = cluster_nodes(settings)
    url = cluster[1] if cluster else services.started_redis_url(settings)  # (nothing started to say where it is)
    given = [f"{name}={redact_url(str(settings[name])) if name == 'REDIS_URL' else settings[name]}"
             for name in WHERE_REDIS_IS
             if settings.get(name) and (settings.getpriority(name) or 0) >= SETTINGS_PRIORITIES["cmdline"]]
    line = " ".join([*given, "crawlhub", "seed", spider, "URL"])
    return f"{line} (or: {services.seed_command(url, key, cluster=bool(cluster))})" if url else line


def is_cluster(server: redis.Redis) -> bool:
    """Whether the client talks to a Redis Cluster."""
    return isinstance(server, RedisCluster)


# Scrapy stats key: the Redis commands a worker's clients sent (the heartbeat turns it into a rate, shown by
# `crawlhub status`; docs/deploy.md: the cost model)
REDIS_COMMANDS_STAT = "redis/commands"


class CommandCounter:
    """Where a client's connections count the commands they send (``redis/commands``): a crawler's stats, given
    when the client is made, or later, when a crawler takes over a client made before it (:func:`take_over`)."""

    def __init__(self, stats: StatsCollector | None = None) -> None:
        self.stats = stats

    def add(self, n: int) -> None:
        if self.stats is not None:
            self.stats.inc_value(REDIS_COMMANDS_STAT, n)


def counted(base: type[AbstractConnection], stats: StatsCollector | CommandCounter) -> type[AbstractConnection]:
    """``base`` (a redis-py connection class) counting in ``stats`` every command it sends, one by one or
    in a pipeline (what the server counts, health-check PINGs and MULTI/EXEC included)."""
    counter = stats if isinstance(stats, CommandCounter) else CommandCounter(stats)

    def send_command(self: Any, *args: Any, **kwargs: Any) -> None:
        counter.add(1)
        base.send_command(self, *args, **kwargs)  # type: ignore[no-untyped-call]

    def pack_commands(self: Any, commands: Any) -> Any:
        commands = list(commands)
        counter.add(len(commands))
        return base.pack_commands(self, commands)  # type: ignore[no-untyped-call]

    return type(f"Counted{base.__name__}", (base,), {"send_command": send_command, "pack_commands": pack_commands})


class _ScriptsByTheirKeys:
    """A cluster pipeline's policy resolver: EVALSHA and EVAL go to the node of their keys (``numkeys`` says which
    they are), found locally. redis-py (6.x to 8.1) asks the server with COMMAND GETKEYS, a round trip of its own
    before the pipeline is sent, for each script call it queues: for its other commands it reads the keys from the
    command table. Every other command falls through to redis-py's own resolver (None here)."""

    def __init__(self) -> None:
        from redis._parsers.commands import CommandPolicies, RequestPolicy, ResponsePolicy

        self.keyed = CommandPolicies(request_policy=RequestPolicy.DEFAULT_KEYED,
                                     response_policy=ResponsePolicy.DEFAULT_KEYED)

    def resolve(self, command_name: str) -> Any:
        return self.keyed if command_name in ("evalsha", "eval", "evalsha_ro", "eval_ro") else None

    def with_fallback(self, fallback: Any) -> Any:
        return self


# The commands crawlhub sends outside its scripts (a cluster client routes them by their keys): their entries of the
# command table are read in one COMMAND INFO when a cluster client is made. Any other command is read the first time
# it is sent, so this list only saves round trips; it decides nothing.
ROUTED_COMMANDS = (
    "del", "exists", "expire", "get", "hdel", "hget", "hgetall", "hincrby", "hkeys", "hlen", "hset", "hsetnx", "hvals",
    "incr", "incrby", "llen", "lpush", "lrange", "lrem", "ltrim", "mget", "pexpire", "rpop", "sadd", "scard", "set",
    "sismember", "smembers", "smismember", "spop", "srem", "type", "xadd", "xlen", "xrange", "xrevrange", "zadd",
    "zcard", "zcount", "zrange", "zrangebyscore", "zrevrange",
)


class _CommandTable(dict[str, Any]):
    """redis-py's cluster command table (a command's name -> its entry of COMMAND, where its keys are), read an
    entry at a time. redis-py reads the whole table (COMMAND, every command's entry: about 0.9 ms of a master's CPU
    and a 100 KB reply) each time a cluster client is made, though a client sends a few dozen commands; here the
    client's usual ones (:data:`ROUTED_COMMANDS`) are read in one COMMAND INFO and any other the first time the
    client routes it. A Redis upgrade does not change a command's key positions, so an entry read stays right;
    a name the server does not know is asked once.

    Nothing is read while the client is being made, only at its first routed command: redis-py 8 closes the
    connections its client opened before its maintenance-notification set-up (the end of its ``__init__``), so a
    read made there costs a master a connection of its own (some 0.4 ms of its CPU: bench/frontier_costs.py)."""

    def __init__(self, node: Any, names: tuple[str, ...]) -> None:
        super().__init__()
        self._node = node  # () -> a node's client (redis-py's default node: the one COMMAND was sent to)
        self._absent: set[str] = set()
        self._first: tuple[str, ...] | None = names  # read with the first entry asked for

    def read(self, names: tuple[str, ...]) -> None:
        if self._first is not None:
            names, self._first = (*self._first, *names), None
        wanted = [n for n in names if not dict.__contains__(self, n) and n not in self._absent]
        if not wanted:
            return
        reply = self._node().execute_command("COMMAND INFO", *wanted)
        # (None in the reply: a name the server does not know)
        self.update(parse_command([entry for entry in reply if entry]))  # type: ignore[no-untyped-call]
        self._absent.update(n for n in wanted if not dict.__contains__(self, n))

    def __contains__(self, name: object) -> bool:
        if isinstance(name, str):
            self.read((name,))
        return dict.__contains__(self, name)


class CrawlhubCluster(RedisCluster):
    """redis-py's cluster client, its pipelines routing script calls by their keys without asking the server
    (:class:`_ScriptsByTheirKeys`; tests/integration/test_redis_cluster.py checks that no COMMAND GETKEYS is sent),
    and its command table read as it is needed (:class:`_CommandTable`) instead of whole when it is made."""

    def command(self, **kwargs: Any) -> Any:
        """The command table, as redis-py's cluster client reads it when it is made (its only use here): a
        :class:`_CommandTable`, which reads an entry the first time it is asked for."""
        return _CommandTable(lambda: self.get_default_node().redis_connection,  # type: ignore[no-untyped-call]
                             ROUTED_COMMANDS)

    def pipeline(self, transaction: Any = None, shard_hint: Any = None) -> Any:
        pipe = super().pipeline(transaction, shard_hint)  # type: ignore[no-untyped-call]
        if hasattr(pipe, "_policy_resolver"):  # (a redis-py without policy resolvers routes scripts by their keys)
            from redis.commands.policies import StaticPolicyResolver

            pipe._policy_resolver = StaticPolicyResolver(fallback=_ScriptsByTheirKeys())  # type: ignore[arg-type]
        return pipe


def get_redis(settings: BaseSettings, stats: StatsCollector | CommandCounter | None = None) -> redis.Redis:
    """A Redis client (bytes responses) for REDIS_URL or the embedded server; a cluster client
    (redis-py's RedisCluster, same commands) when the settings name a Redis Cluster. With ``stats``
    (a crawler's, or a :class:`CommandCounter` given one later), the client counts the commands it sends there
    (``redis/commands``)."""
    params: dict[str, Any] = dict(REDIS_PARAMS)
    # a restarted Redis: reconnect with backoff (about 20 s in all) before failing
    params["retry"] = Retry(ExponentialBackoff(cap=3.0, base=0.1), settings.getint("REDIS_RETRIES", 10))
    params["retry_on_error"] = [redis.ConnectionError, redis.TimeoutError]
    params.update(settings.getdict("REDIS_PARAMS"))
    cluster = cluster_nodes(settings)
    if cluster is not None:
        nodes, url = cluster
        params.pop("health_check_interval", None)
        params.pop("retry_on_error", None)
        # a failover: redis-py re-reads the slots (MOVED, or a node that stopped answering) and retries, at least 3
        # times: redis-py 6 and later by the client's ``retry`` (a REDIS_PARAMS one wins), 5 by a count of its own
        # (deprecated since 6: passed there, it only warns)
        attempts = max(3, settings.getint("REDIS_RETRIES", 10))
        if int(redis.__version__.split(".")[0]) < 6:
            params["cluster_error_retry_attempts"] = attempts
        elif "retry" not in settings.getdict("REDIS_PARAMS"):
            params["retry"] = Retry(ExponentialBackoff(cap=3.0, base=0.1), attempts)
        if stats is not None:  # (each node's pool makes its connections of this class)
            params["connection_class"] = counted(SSLConnection if params.get("ssl") else Connection, stats)
        startup = [ClusterNode(h, p) for h, p in nodes]  # type: ignore[no-untyped-call]
        client = CrawlhubCluster.from_url(url, startup_nodes=startup, **params)
        return client  # type: ignore[return-value]  # the same commands as redis.Redis
    url = services.redis_url(settings)
    try:
        single = redis.Redis.from_url(url, **params)
    except ValueError as exc:  # no scheme, a bad port or database
        raise BadURL(f"REDIS_URL {redact_url(url)!r} is not a Redis URL: {exc} "
                     "(e.g. redis://:PASSWORD@host:6379/0, rediss:// for TLS)") from None
    if stats is not None:  # the class from_url chose (TCP, TLS or a socket file), counting; no connection is made yet
        pool = single.connection_pool
        pool.connection_class = counted(pool.connection_class, stats)
    return single


def connect_redis(settings: BaseSettings, stats: StatsCollector | CommandCounter | None = None) -> redis.Redis:
    """get_redis(), waiting up to REDIS_STARTUP_WAIT seconds for the server to answer.

    Raises :class:`Unreachable` with a one-line reason when it does not.
    """
    try:
        url, cluster = redis_location(settings)
    except ValueError as exc:
        raise BadURL(str(exc)) from None
    if cluster:
        return _connect_cluster(settings, url, stats)
    server = get_redis(settings, stats)
    retry = server.get_retry()
    server.set_retry(Retry(ExponentialBackoff(), 0))  # retry_startup says what happens
    refused = f"Redis at {redact_url(url)} refused the credentials"

    def attempt() -> redis.Redis:
        try:
            server.ping()
        except (redis.AuthenticationError, redis.ResponseError) as exc:
            if not isinstance(exc, redis.AuthenticationError) and not _is_auth_error(exc):
                raise
            raise Unreachable(f"{refused}: {exc} (a final answer: check the password in REDIS_URL)") from None
        if retry is not None:
            server.set_retry(retry)
        return server

    return retry_startup(settings, f"Redis at {redact_url(url)} is not answering",
                         f"cannot reach Redis at {redact_url(url)}", attempt, then="stopping with exit code 2")


# The attribute of a Crawler that holds the Redis client the crawl command's checks connected, until its scheduler
# takes it (crawlhub.commands.crawl; crawlhub.frontier.scheduler)
HANDED_REDIS = "_crawlhub_redis"


def redis_identity(settings: BaseSettings) -> str:
    """What makes the Redis clients of two settings interchangeable: the server or cluster, its parameters, its
    retries (the password is in the URL: this string is compared, never shown)."""
    params = {k: repr(v) for k, v in settings.getdict("REDIS_PARAMS").items()}
    return json.dumps([redis_location(settings), settings.get("REDIS_CLUSTER_NODES") or "", params,
                       settings.getint("REDIS_RETRIES", 10)], sort_keys=True, default=str)


def hand_over(crawler: Any, server: redis.Redis, settings: BaseSettings, counter: CommandCounter) -> None:
    """Leave ``server``, connected for ``settings`` before ``crawler`` was made (the crawl command's checks: Redis
    answers, the duplicate filter's settings), to the crawler's scheduler, which would connect again: a new
    connection costs a Redis server some 0.4 ms of CPU, and a cluster client opens one to each master, so a worker
    that connected twice cost each master twice that at every start (bench/frontier_costs.py)."""
    setattr(crawler, HANDED_REDIS, (redis_identity(settings), server, counter))


def take_over(crawler: Any) -> redis.Redis | None:
    """The client :func:`hand_over` left to ``crawler``, now counting its commands in the crawler's stats; None if
    none was left, or if it was made for other Redis settings than the crawler's (it is closed then)."""
    handed = vars(crawler).pop(HANDED_REDIS, None)
    if handed is None:
        return None
    identity, server, counter = handed
    if identity != redis_identity(crawler.settings):
        server.close()
        return None
    counter.stats = crawler.stats
    return server  # type: ignore[no-any-return]


def retry_startup(settings: BaseSettings, waiting: str, giving_up: str, attempt: Callable[[], T],
                  then: str = "") -> T:
    """attempt() again while it raises a Redis error, for up to REDIS_STARTUP_WAIT seconds (0.5 s between tries,
    doubling to 5 s), each time logging "<waiting> (<why>); retrying in <s>" (the first time also for how long it
    waits, and ``then`` what it does); then :class:`Unreachable`, one line: "<giving_up>: <why>"."""
    wait = settings.getfloat("REDIS_STARTUP_WAIT", 30)
    deadline = time.monotonic() + wait
    delay = 0.5
    while True:
        try:
            return attempt()
        except REDIS_ERRORS as exc:
            if time.monotonic() + delay > deadline:
                raise Unreachable(f"{giving_up}: {exc}") from None
            if delay == 0.5:  # the first time: what the worker does now, and for how long
                logger.warning("%s (%s): waiting up to %.0fs for it (REDIS_STARTUP_WAIT)%s; retrying in %.1fs",
                               waiting, exc, wait, f", then {then}" if then else "", delay)
            else:
                logger.warning("%s (%s); retrying in %.1fs", waiting, exc, delay)
            time.sleep(delay)
            delay = min(delay * 2, 5)


class ClusterNotReady(redis.RedisError):
    """Every node answers, but a master says the cluster is down."""


def _connect_cluster(settings: BaseSettings, url: str, stats: StatsCollector | CommandCounter | None) -> redis.Redis:
    """A cluster client, once the cluster answers (its slots are read when the client is made) and every master
    says it is ok: a node answers PING while the cluster is down (a master lost, slots uncovered, a node that has
    not heard from the others yet), and a command on a key would fail with CLUSTERDOWN."""
    def attempt() -> redis.Redis:
        try:
            server = get_redis(settings, stats)
            server.ping()
        except redis.AuthenticationError as exc:
            raise Unreachable(f"Redis Cluster at {redact_url(url)} refused the credentials: {exc}") from None
        except REDIS_ERRORS as exc:
            if _is_auth_error(exc):
                raise Unreachable(f"Redis Cluster at {redact_url(url)} refused the credentials: {exc}") from None
            raise
        down = cluster_down(server)
        if down:
            raise ClusterNotReady(f"the cluster is down: {down}")
        return server

    return retry_startup(settings, f"The Redis Cluster at {redact_url(url)} is not ready",
                         f"cannot use the Redis Cluster at {redact_url(url)}", attempt, then="stopping with exit code 2")


def cluster_down(server: redis.Redis) -> str:
    """'' when every master of the cluster says cluster_state:ok; else which says what."""
    reply: dict[str, Any] = server.cluster_info(target_nodes=RedisCluster.PRIMARIES)  # type: ignore[attr-defined]
    states: dict[str, Any] = {"the master": reply} if "cluster_state" in reply else reply  # (one master: its own)
    bad = [f"{node} says cluster_state:{info.get('cluster_state')}" for node, info in states.items()
           if info.get("cluster_state") != "ok"]
    return ", ".join(bad)


def _is_auth_error(exc: Exception) -> bool:
    text = str(exc).upper()
    return any(word in text for word in ("WRONGPASS", "NOAUTH", "AUTH ", "INVALID PASSWORD", "INVALID USERNAME"))


def get_mongo(settings: BaseSettings, server_selection_timeout_ms: int | None = None) -> MongoClient[Any]:
    """A pymongo client for MONGO_URI or the embedded server (:class:`BadURL` for a malformed MONGO_URI)."""
    import pymongo
    from pymongo.errors import ConfigurationError

    uri = services.mongo_uri(settings)
    try:
        return pymongo.MongoClient(
            uri,
            serverSelectionTimeoutMS=server_selection_timeout_ms or settings.getint("MONGO_SERVER_SELECTION_TIMEOUT_MS", 10000),
            appname=settings.get("BOT_NAME", "crawlhub"),
        )
    except (ConfigurationError, ValueError) as exc:  # InvalidURI (an unescaped % or @), an unknown option
        raise BadURL(f"MONGO_URI {redact_url(uri)!r} is not a MongoDB URI: {str(exc).splitlines()[0][:200]} "
                     "(a password with @ : / % must be percent-encoded)") from None


def check_mongo(settings: BaseSettings) -> None:
    """MongoDB answers within MONGO_STARTUP_WAIT seconds (0: a short look, 2 s at most), else :class:`Unreachable`
    with one line (no topology)."""
    from pymongo.errors import PyMongoError

    uri = settings.get("MONGO_URI") or "the embedded MongoDB"
    wait = settings.getfloat("MONGO_STARTUP_WAIT") or min(2.0, settings.getint("MONGO_SERVER_SELECTION_TIMEOUT_MS", 10000) / 1000)
    client = get_mongo(settings, max(1, int(wait * 1000)))
    try:
        client.admin.command("ping")
    except PyMongoError as exc:
        raise Unreachable(f"cannot reach MongoDB at {redact_url(uri)}: {mongo_error(exc)} (MONGO_URI)") from None
    finally:
        client.close()
