"""A real local Redis Cluster for the tests and the scale benchmark: ``redis-server --cluster-enabled yes``
on loopback ports, joined by ``redis-cli --cluster create ... --cluster-yes``, stopped (and its files
removed) by whoever started it."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import redis
from redis.cluster import ClusterNode, RedisCluster


class PortTaken(RuntimeError):
    """A node exited at its start: its port or its cluster bus port was taken meanwhile."""


def _free_port_pair() -> int:
    """A loopback port p with p + 10000 (the cluster bus) free too."""
    for _ in range(200):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port + 10000 > 65535:
            continue
        with socket.socket() as bus:
            try:
                bus.bind(("127.0.0.1", port + 10000))
            except OSError:
                continue
        return port
    raise RuntimeError("no free port pair for a cluster node")


class LocalRedisCluster:
    """``masters`` primaries, each with ``replicas`` replicas; AOF on (fsync every write: nothing a
    master acknowledged is lost by a kill -9 of that master alone... but see failover in docs/deploy.md)."""

    def __init__(self, home: Path, masters: int = 3, replicas: int = 0, node_timeout_ms: int = 2000,
                 appendonly: bool = True):
        self.home = Path(home)
        self.masters, self.replicas = masters, replicas
        self.node_timeout_ms = node_timeout_ms
        self.appendonly = appendonly
        self.procs: dict[int, subprocess.Popen] = {}

    # -- life ------------------------------------------------------------------------------------------
    def start(self) -> LocalRedisCluster:
        count = self.masters * (1 + self.replicas)
        for _ in range(count):
            self._spawn(_free_port_pair())
        try:
            self._form(count)
        except BaseException:  # no node outlives a start that failed (__exit__ is not called then)
            self.stop()
            raise
        return self

    def _form(self, count: int) -> None:
        for port in list(self.procs):
            self._ready(port)
        nodes = [f"127.0.0.1:{p}" for p in self.procs]
        if count == 1:  # redis-cli creates clusters of 3 masters or more: one node takes every slot itself
            only = redis.Redis(port=next(iter(self.procs)))
            only.execute_command("CLUSTER", "ADDSLOTSRANGE", 0, 16383)
            self.wait_ok()
            return
        out = subprocess.run(["redis-cli", "--cluster", "create", *nodes, "--cluster-replicas", str(self.replicas),
                              "--cluster-yes"], capture_output=True, text=True, timeout=60)
        if out.returncode != 0:
            raise RuntimeError(f"redis-cli --cluster create failed: {out.stdout[-2000:]} {out.stderr[-2000:]}")
        self.wait_ok()
        if self.replicas:
            self.wait_replicas()

    def wait_replicas(self, timeout: float = 30) -> None:
        """Until every replica's link to its primary is up (a replica that never synced cannot take over)."""
        deadline = time.monotonic() + timeout
        while True:
            links = []
            for port in self.live_ports():
                info = redis.Redis(port=port, socket_timeout=1).info("replication")
                if info.get("role") == "slave":
                    links.append(info.get("master_link_status") == "up")
            if len(links) == self.masters * self.replicas and all(links):
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"replicas not in sync after {timeout}s: {links}")
            time.sleep(0.1)

    def _spawn(self, port: int) -> None:
        d = self.home / str(port)
        d.mkdir(parents=True, exist_ok=True)
        args = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--cluster-enabled", "yes",
                "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", str(self.node_timeout_ms),
                "--dir", str(d), "--save", "", "--logfile", "redis.log",
                "--appendonly", "yes" if self.appendonly else "no", "--appendfsync", "everysec",
                # a replica takes over however long it was cut off (tests kill masters on purpose)
                "--cluster-replica-validity-factor", "0"]
        self.procs[port] = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def _ready(self, port: int, tries: int = 5) -> None:
        """Until the node on ``port`` answers. A node that exited (another process took its port or its bus port
        between their choice and its start: a busy machine's race) is started again on another port."""
        for _ in range(tries - 1):
            try:
                self._wait_ping(port)
                return
            except PortTaken:
                self.procs.pop(port)
                port = _free_port_pair()
                self._spawn(port)
        self._wait_ping(port)

    def _wait_ping(self, port: int, timeout: float = 15) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                if redis.Redis(host="127.0.0.1", port=port, socket_timeout=1).ping():
                    return
            except redis.RedisError:
                if self.procs[port].poll() is not None:  # it could not listen: whatever answers is not it
                    raise PortTaken(f"redis-server on port {port} exited ({self.procs[port].returncode})") from None
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def wait_ok(self, timeout: float = 30, alive: list[int] | None = None) -> None:
        """Until every live node says cluster_state:ok and agrees on the primaries."""
        deadline = time.monotonic() + timeout
        ports = alive or self.live_ports()
        while True:
            try:
                states = [redis.Redis(port=p, socket_timeout=1).cluster("info") for p in ports]
                if all(s.get("cluster_state") == "ok" for s in states):
                    return
            except redis.RedisError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"the cluster did not become ok in {timeout}s")
            time.sleep(0.1)

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
        for proc in self.procs.values():
            with contextlib.suppress(Exception):
                proc.wait(5)
        self.procs.clear()
        shutil.rmtree(self.home, ignore_errors=True)

    def __enter__(self) -> LocalRedisCluster:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- what it is --------------------------------------------------------------------------------------
    def live_ports(self) -> list[int]:
        return [p for p, proc in self.procs.items() if proc.poll() is None]

    @property
    def nodes(self) -> str:
        """REDIS_CLUSTER_NODES for crawlhub: every node, ``host:port,...``."""
        return ",".join(f"127.0.0.1:{p}" for p in self.live_ports())

    @property
    def url(self) -> str:
        return "redis+cluster://" + self.nodes

    def client(self) -> RedisCluster:
        return RedisCluster(startup_nodes=[ClusterNode("127.0.0.1", p) for p in self.live_ports()])

    def primaries(self) -> list[int]:
        """Ports of the primaries now, per the cluster itself."""
        for port in self.live_ports():
            try:
                nodes = redis.Redis(port=port, socket_timeout=1).cluster("nodes")
            except redis.RedisError:
                continue
            return sorted(int(addr.split(":")[1].split("@")[0]) for addr, info in nodes.items()
                          if "master" in info["flags"] and "fail" not in info["flags"] and info["connected"])
        raise RuntimeError("no node answers")

    def replica_of(self, primary: int) -> int | None:
        for port in self.live_ports():
            role = redis.Redis(port=port, socket_timeout=1).execute_command("ROLE")
            if role[0] == b"slave" and int(role[2]) == primary:
                return port
        return None

    def wait_promoted(self, port: int, timeout: float = 30) -> None:
        """Until the node at ``port`` is a primary (a failover), then until the cluster is ok again."""
        deadline = time.monotonic() + timeout
        while redis.Redis(port=port, socket_timeout=1).execute_command("ROLE")[0] != b"master":
            if time.monotonic() > deadline:
                raise TimeoutError(f"{port} was not promoted in {timeout}s")
            time.sleep(0.1)
        self.wait_ok(max(1.0, deadline - time.monotonic()))

    def flush(self) -> None:
        for port in self.primaries():
            redis.Redis(port=port).flushall()

    def restart(self) -> None:
        """Every node stopped with SIGTERM (each writes its AOF) and started again on its port and files: a
        cluster restarted from its AOF. Returns once the cluster is ok again."""
        ports = self.live_ports()
        for port in ports:
            self.procs[port].terminate()
        for port in ports:
            self.procs[port].wait(15)
        for port in ports:
            self._spawn(port)
        for port in ports:
            self._wait_ping(port)
        self.wait_ok()

    def kill(self, port: int) -> None:
        """kill -9 one node."""
        os.kill(self.procs[port].pid, signal.SIGKILL)
        self.procs[port].wait(5)

    def commandstats_usec(self) -> dict[int, int]:
        """Total usec of every command (scripts' inner calls excluded: EVALSHA's own usec counts them), per primary."""
        out = {}
        for port in self.primaries():
            stats = redis.Redis(port=port).info("commandstats")
            out[port] = sum(int(v["usec"]) for k, v in stats.items() if k.startswith("cmdstat_")
                            and "|" not in k[8:])
        return out
