"""The frontier's fixed costs (#30): Redis CPU per page of a real crawl, and per idle worker-second.

Real parts throughout: a local shop (tests/sites: WooCommerce listing pages, 16 products each,
answering in 0.05 s), real ``scrapy crawl scrapeme`` workers storing into SecantusDB, and for each
layout a fresh Redis: one redis-server, or a 3-master Redis Cluster made by ``redis-cli --cluster
create`` (persistence off in both). For 1, 8 and 48 partitions on each, side by side:

For each layout, a fresh server or cluster, three measurements in turn:

- own: the servers' CPU (``INFO cpu``, main thread, summed over the masters) and commands
  (``total_commands_processed``) over WINDOW seconds with no worker: a cluster's gossip, the cron;
- crawl (``--repeat`` times, the servers emptied and their own cost measured before and after each; the
  median crawl is reported, every run's figure beside it): N workers started, the shop seeded, every worker run until it closes on idle
  (MAX_IDLE_TIME_BEFORE_CLOSE), as a crawl of ``scrapy crawl`` does: Redis CPU and commands from
  before the workers start to after the last exits (start-up, the crawl, the idle wait, the close),
  per page fetched, with the servers' own CPU over that time taken off (and raw); and the commands
  each worker counted itself (its heartbeat's ``redis_commands``);
- idle: K more workers started with nothing to crawl (they wait for seeds forever); once each has
  sent its second heartbeat, what they add to the servers' own over WINDOW seconds, per idle
  worker-second, and the commands they counted themselves. ``--idle-turns`` such windows (the median
  reported, every turn beside it), each between two windows of the servers' own with the workers
  stopped (SIGSTOP: still connected, sending nothing), the mean of the two taken off: the servers'
  own is measured next to each idle window, not minutes away (a cluster's gossip drifts by a
  millisecond a second over minutes, as much as six idle workers cost).

Goals (#30): an idle worker under 300 us of Redis CPU per second at 48 partitions; a cluster's CPU
per page within 1.5x of one redis-server with one partition.

    .venv/bin/python -m bench.frontier_costs                 # 3 crawl workers, 48 pages, 6 idle workers, 10 s windows
    .venv/bin/python -m bench.frontier_costs --quick         # 1 and 48 partitions only
    .venv/bin/python -m bench.frontier_costs --full-speed 10000   # the saturated cost per page, one worker
    .venv/bin/python -m bench.frontier_costs --starts 5 --window 5 --against ../old   # a worker's start and close
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

import redis

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.frontier_scale import PlainRedis  # noqa: E402
from crawlhub.services import EmbeddedMongo  # noqa: E402
from tests.harness import crawl_env, start_worker, wait_for  # noqa: E402
from tests.redis_cluster import LocalRedisCluster  # noqa: E402
from tests.sites.server import LocalSite  # noqa: E402
from tests.sites.shop import shop_pages  # noqa: E402

SPIDER = "scrapeme"
PER_PAGE = 16
GOAL_IDLE_US, GOAL_CLUSTER = 300.0, 1.5


class Servers:
    """One redis-server or a 3-master cluster: the env that points workers at it, and its counters."""

    def __init__(self, home: Path, cluster: bool):
        self.cluster = cluster
        if cluster:
            self.nodes = LocalRedisCluster(home, masters=3, appendonly=False).start()
            self.ports = self.nodes.primaries()
        else:
            home.mkdir(parents=True, exist_ok=True)
            self.plain = PlainRedis(home)
            self.ports = [self.plain.port]
        # the readings' own clients, connected once: a new connection costs a server about 0.4 ms of CPU, which a
        # reading made on a new one would count in the crawl (one a master at each end)
        self.readers = [redis.Redis(port=port) for port in self.ports]
        for r in self.readers:
            r.ping()

    def env(self) -> dict[str, str]:
        if self.cluster:
            return {"REDIS_CLUSTER_NODES": self.nodes.nodes}
        return {"REDIS_URL": f"redis://127.0.0.1:{self.ports[0]}/0"}

    def client(self):
        return self.nodes.client() if self.cluster else redis.Redis(port=self.ports[0])

    def reading(self) -> tuple[float, int]:
        """(CPU seconds of the main thread, the one that serves commands; commands processed), summed over the masters."""
        cpu, commands = 0.0, 0
        for r in self.readers:
            info = r.info("cpu")
            cpu += float(info["used_cpu_user_main_thread"]) + float(info["used_cpu_sys_main_thread"])
            commands += int(r.info("stats")["total_commands_processed"])
        return cpu, commands

    def command_usec(self) -> int:
        """INFO commandstats' usec summed over the commands and the masters (a script's commands are counted
        in their own rows and in its EVALSHA's: inside scripts, twice). No idle CPU in it: steadier than CPU."""
        return sum(int(v["usec"]) for r in self.readers for v in r.info("commandstats").values())

    def flush(self) -> None:
        """Every master emptied (FLUSHALL): the next crawl starts from nothing."""
        for r in self.readers:
            r.flushall()

    def stop(self) -> None:
        if self.cluster:
            self.nodes.stop()
        else:
            self.plain.stop()


def workers_env(servers: Servers, mongo_uri: str, database: str, home: Path, partitions: int, idle_close: int) -> dict:
    env = crawl_env("", mongo_uri, database, home, FRONTIER_PARTITIONS=partitions,
                    MAX_IDLE_TIME_BEFORE_CLOSE=idle_close, LOG_LEVEL="INFO")
    env.pop("REDIS_URL")
    env.update(servers.env())
    return env


def start_workers(n: int, env: dict, logs: Path, label: str) -> list:
    return [start_worker(SPIDER, env, logs, f"{label}-{i}", CONCURRENT_REQUESTS=4) for i in range(n)]


def heartbeats(client) -> dict[str, dict]:
    return {k.decode(): json.loads(v) for k, v in client.hgetall(f"{SPIDER}:workers").items()}


def measure(servers: Servers, seconds: float) -> tuple[float, int]:
    """Redis CPU seconds and commands over ``seconds`` from now."""
    cpu0, cmd0 = servers.reading()
    time.sleep(seconds)
    cpu1, cmd1 = servers.reading()
    return cpu1 - cpu0, cmd1 - cmd0 - len(servers.ports) * 2  # (the readings' own INFOs)


def crawl_phase(servers: Servers, label: str, partitions: int, workers: int, pages: int, mongo_uri: str,
                idle_close: int, home: Path) -> dict:
    shop = LocalSite(shop_pages(pages * PER_PAGE, PER_PAGE), delay=0.05).start()
    try:
        env = workers_env(servers, mongo_uri, f"crawl{label}", home / "crawlhub", partitions, idle_close)
        client = servers.client()
        client.exists(f"{SPIDER}:start_urls")  # (connected to the seeds' node before the first reading)
        cpu0, cmd0 = servers.reading()
        usec0 = servers.command_usec()
        started = time.monotonic()
        procs = start_workers(workers, env, home / "logs", f"crawl{label}")
        client.lpush(f"{SPIDER}:start_urls", f"{shop.url}/shop/")
        for p in procs:
            code = p.proc.wait(300)
            if code != 0:
                raise SystemExit(f"worker {p.name} exited {code}: {p.log()[-3000:]}")
        took = time.monotonic() - started
        cpu1, cmd1 = servers.reading()
        usec1 = servers.command_usec()
        fetched = len(set(shop.fetched("/shop")))
        if fetched != pages:
            raise SystemExit(f"{fetched} of {pages} listing pages fetched")
        records = heartbeats(client)
        return {"pages": fetched, "cpu": cpu1 - cpu0, "commands": cmd1 - cmd0, "seconds": took,
                "command_us_per_page": (usec1 - usec0) / fetched,
                "per_worker": sorted(r.get("redis_commands", 0) for r in records.values()),
                "fetches": len(shop.fetched("/shop"))}
    finally:
        shop.stop()


def idle_phase(servers: Servers, label: str, partitions: int, workers: int, window: float, mongo_uri: str,
               home: Path, turns: int) -> dict:
    """``workers`` workers with nothing to crawl, once past their start-up, against the servers' own cost measured
    between their windows: ``turns`` windows of ``window`` seconds with the workers running, each between two with
    them stopped (SIGSTOP: connected, sending nothing), so that a window of the servers' own is never minutes away
    from the one it is taken off (a cluster's gossip drifts by a millisecond a second over minutes). Per turn, what
    the workers added: CPU seconds and commands; and the commands the workers counted themselves per second they
    ran (between two of their heartbeats, the stops taken off; above the servers' count with short windows: it holds
    the second after each resume, when the timers that came due while stopped fire)."""
    env = workers_env(servers, mongo_uri, f"idle{label}", home / "crawlhub", partitions, 0)
    client = servers.client()
    client.delete(f"{SPIDER}:workers")  # (the crawl's finished workers: only these are counted)
    procs = start_workers(workers, env, home / "logs", f"idle{label}")

    stopped = []  # (wall clock: stopped at, resumed at), for the seconds the workers' own count covers

    def pause(stop: bool) -> None:
        for p in procs:
            p.proc.send_signal(signal.SIGSTOP if stop else signal.SIGCONT)
        if stop:
            stopped.append([time.time(), None])
        else:
            stopped[-1][1] = time.time()
        time.sleep(1.0)  # (stopped: what was in flight lands; resumed: the timers due meanwhile fire, once each)

    try:
        if not wait_for(lambda: len(heartbeats(client)) == workers, 90):
            raise SystemExit(f"idle workers did not start: {procs[0].log()[-2000:]}")
        first = {w: r["last_beat"] for w, r in heartbeats(client).items()}
        wait_for(lambda: all(r["last_beat"] > first[w] for w, r in heartbeats(client).items()), 60)
        before = heartbeats(client)
        pause(True)
        own = [measure(servers, window)]
        busy = []
        for _ in range(turns):
            pause(False)
            busy.append(measure(servers, window))
            pause(True)
            own.append(measure(servers, window))
        pause(False)
        # the workers' own count, from their next heartbeat (it carries what they sent up to it)
        wait_for(lambda: all(r["last_beat"] > stopped[-1][1] for r in heartbeats(client).values()), 30)
        after = heartbeats(client)
        counted = sum(after[w].get("redis_commands", 0) - before[w].get("redis_commands", 0) for w in after)
        # the worker-seconds between each worker's two heartbeats, the stops taken off (every stop lies between them)
        running = sum(after[w]["last_beat"] - before[w]["last_beat"] for w in after) - len(after) * sum(
            resumed - at for at, resumed in stopped)
        added = [(cpu - (own[i][0] + own[i + 1][0]) / 2, cmds - (own[i][1] + own[i + 1][1]) / 2)
                 for i, (cpu, cmds) in enumerate(busy)]
        return {"cpu": [a[0] for a in added], "commands": [a[1] for a in added], "counted": counted / running}
    finally:
        for p in procs:
            p.proc.send_signal(signal.SIGCONT)
            p.kill()


def run_layout(home: Path, cluster: bool, partitions: int, opts: argparse.Namespace, mongo_uri: str) -> dict:
    """One fresh server or cluster: its own idle cost, then the crawl (``--repeat`` times, the servers emptied
    and their own cost measured again before each: the median is kept), then idle workers on it."""
    label = f"{'c' if cluster else 's'}{partitions}"
    servers = Servers(home / label, cluster)
    crawls: list[dict] = []
    try:
        time.sleep(1.0)  # (a server's first second after start is not its idle cost)
        for turn in range(opts.repeat):
            servers.flush()
            own_cpu, _ = measure(servers, opts.window)
            crawl = crawl_phase(servers, f"{label}r{turn}", partitions, opts.workers, opts.pages, mongo_uri,
                                opts.idle_close, home)
            after_cpu, _ = measure(servers, opts.window)  # (the servers' own, after: the mean of both is taken off)
            crawl["own_rate"] = (own_cpu + after_cpu) / (2 * opts.window)
            crawl["us_per_page"] = max(0.0, crawl["cpu"] - crawl["own_rate"] * crawl["seconds"]) * 1e6 / crawl["pages"]
            crawls.append(crawl)
        own_rate = statistics.median(c["own_rate"] for c in crawls)
        servers.flush()
        idle = idle_phase(servers, label, partitions, opts.idle_workers, opts.window, mongo_uri, home, opts.idle_turns)
    finally:
        servers.stop()
    crawl = sorted(crawls, key=lambda c: c["us_per_page"])[len(crawls) // 2]  # the median crawl
    pages, worker_seconds = crawl["pages"], opts.idle_workers * opts.window
    return {
        "layout": "3-master cluster" if cluster else "one redis-server", "partitions": partitions,
        "server_idle_us_per_s": own_rate * 1e6,
        "us_per_page_raw": crawl["cpu"] * 1e6 / pages,
        "us_per_page": crawl["us_per_page"],
        "us_per_page_runs": [round(c["us_per_page"]) for c in crawls],
        "commands_per_page": crawl["commands"] / pages, "seconds": crawl["seconds"], "fetches": crawl["fetches"],
        "command_us_per_page": statistics.median(c["command_us_per_page"] for c in crawls),
        "per_worker": crawl["per_worker"],
        # the median turn; every turn's figure beside it
        "idle_us_per_worker_s": max(0.0, statistics.median(idle["cpu"])) * 1e6 / worker_seconds,
        "idle_us_runs": [round(c * 1e6 / worker_seconds) for c in idle["cpu"]],
        "idle_commands_per_worker_s": max(0.0, statistics.median(idle["commands"])) / worker_seconds,
        "idle_counted_per_worker_s": idle["counted"],
    }


def full_speed(home: Path, pages: int) -> None:
    """One worker crawling bench/site.py as fast as it can (bench/frontier.py's crawl: CONCURRENT_REQUESTS=32,
    no politeness limit, no pipelines) on a private redis-server: Redis main-thread CPU per page, the server's
    own idle taken off, and INFO commandstats per page (a script's inner commands are counted in their own
    rows and in its EVALSHA's time)."""
    import subprocess

    from bench.frontier import SPIDER as BENCH_SPIDER
    from bench.frontier import run_crawl

    servers = Servers(home, cluster=False)
    site = subprocess.Popen([sys.executable, "-m", "bench.site", "--pages", str(pages)], cwd=ROOT,
                            stdout=subprocess.PIPE, text=True)
    try:
        base = f"http://127.0.0.1:{int(site.stdout.readline().split()[1])}"
        client = servers.client()
        own, _ = measure(servers, 5.0)
        client.config_resetstat()
        cpu0, _ = servers.reading()
        started = time.monotonic()
        client.lpush(f"{BENCH_SPIDER}:start_urls", f"{base}/p/0")
        row = run_crawl("crawlhub", f"{base}/p/0", servers.env()["REDIS_URL"], 1, ROOT)
        took = time.monotonic() - started
        cpu1 = servers.reading()[0]
        stats = client.info("commandstats")
        after, _ = measure(servers, 5.0)  # (its own idle again, after: a window can catch the server busy with itself)
        rate = (own + after) / 10.0
        cpu = cpu1 - cpu0 - rate * took
        n = row["pages"]
        print(f"\n## Full speed: one worker, {n} pages of bench/site.py in {row['seconds']:.1f} s "
              f"({row['pages_per_s']:.0f} pages/s): Redis main-thread CPU {cpu * 1e6 / n:.1f} us/page, its own idle "
              f"({own / 5.0 * 1e6:.0f} us/s before, {after / 5.0 * 1e6:.0f} after: the mean) taken off; goal <= 30 us: "
              f"{'met' if cpu * 1e6 / n <= 30 else 'SHORT'}; in commands (INFO commandstats, the scripts' own Lua "
              f"included): {sum(int(v['usec']) for v in stats.values()) / n:.1f} us/page")
        rows = sorted(((k[8:], int(v["calls"]), int(v["usec"])) for k, v in stats.items()), key=lambda r: -r[2])
        for name, calls, usec in rows[:12]:
            print(f"  {name:16} {calls / n:6.4f} calls/page {usec / n:7.2f} us/page {usec / max(1, calls):8.2f} us/call")
    finally:
        site.terminate()
        site.wait()
        servers.stop()


def starts(home: Path, count: int, window: float, against: Path | None) -> None:
    """A worker's start and close on a frontier with nothing to crawl (``scrapy crawl``, MAX_IDLE_TIME_BEFORE_CLOSE=1,
    48 partitions): Redis main-thread CPU summed over the masters from before the worker starts to after it exits,
    the servers' own (a window before and after) taken off, and the connections it made (INFO stats). ``count``
    starts per layout; with ``against`` (another checkout), that tree's worker takes turns with this one's, on the
    same servers."""
    import subprocess

    trees = [("this tree", ROOT)] + ([("against", against)] if against else [])
    mongo = EmbeddedMongo(home / "mongo")
    mongo.ensure()
    try:
        for cluster in (False, True):
            servers = Servers(home / f"starts{int(cluster)}", cluster)
            rows: dict[str, list[tuple[float, int, int, float, float]]] = {name: [] for name, _ in trees}
            try:
                time.sleep(1.0)
                for turn in range(count):
                    for name, tree in trees:
                        servers.flush()
                        env = workers_env(servers, mongo.url(), f"starts{turn}", home / "crawlhub", 48, 1)
                        before, _ = measure(servers, window)
                        cpu0, cmd0 = servers.reading()
                        usec0 = servers.command_usec()
                        conn0 = sum(int(r.info("stats")["total_connections_received"]) for r in servers.readers)
                        started = time.monotonic()
                        done = subprocess.run([sys.executable, "-m", "scrapy", "crawl", SPIDER, "-s", "LOG_LEVEL=WARNING"],
                                              cwd=tree, env=env, capture_output=True, text=True, timeout=120)
                        took = time.monotonic() - started
                        cpu1, cmd1 = servers.reading()
                        usec1 = servers.command_usec()
                        conn1 = sum(int(r.info("stats")["total_connections_received"]) for r in servers.readers)
                        after, _ = measure(servers, window)
                        if done.returncode != 0:
                            raise SystemExit(f"{name}: the worker exited {done.returncode}: {done.stderr[-2000:]}")
                        own = (before + after) / (2 * window)
                        rows[name].append(((cpu1 - cpu0 - own * took) * 1e3, conn1 - conn0, cmd1 - cmd0,
                                           (usec1 - usec0) / 1e3, took))
            finally:
                servers.stop()
            layout = "3-master cluster" if cluster else "one redis-server"
            for name, got in rows.items():
                ms = sorted(r[0] for r in got)
                print(f"{layout:>16} {name:>10}: a worker's start and close {statistics.median(ms):6.2f} ms of Redis CPU "
                      f"(runs {', '.join(f'{m:.2f}' for m in (r[0] for r in got))}), connections "
                      f"{sorted({r[1] for r in got})}, commands {statistics.median(r[2] for r in got):.0f}, their "
                      f"time {statistics.median(r[3] for r in got):.2f} ms, {statistics.median(r[4] for r in got):.1f} s",
                      flush=True)
    finally:
        mongo.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, default=3, help="workers of the crawl")
    parser.add_argument("--idle-workers", type=int, default=6, help="workers started with nothing to crawl")
    parser.add_argument("--pages", type=int, default=48, help="listing pages of the shop (16 products each)")
    parser.add_argument("--window", type=float, default=10.0, help="seconds of idle traffic measured")
    parser.add_argument("--idle-turns", type=int, default=3,
                        help="idle windows per layout, each between two of the servers' own (the workers stopped): "
                             "the median is reported")
    parser.add_argument("--idle-close", type=int, default=3, help="MAX_IDLE_TIME_BEFORE_CLOSE of the crawl")
    parser.add_argument("--quick", action="store_true", help="1 and 48 partitions only")
    parser.add_argument("--repeat", type=int, default=3,
                        help="crawls per layout (the servers emptied before each): the median is reported")
    parser.add_argument("--json", help="write the figures to this file too")
    parser.add_argument("--full-speed", type=int, metavar="PAGES",
                        help="instead: one worker at full speed on bench/site.py, Redis CPU per page and where it goes")
    parser.add_argument("--starts", type=int, metavar="N",
                        help="instead: a worker's start and close on an empty frontier, N times per layout")
    parser.add_argument("--against", type=Path, help="with --starts: another checkout's worker, taking turns")
    opts = parser.parse_args(argv)
    if opts.starts:
        home = Path(tempfile.mkdtemp(prefix="bench-costs-"))
        try:
            starts(home, opts.starts, opts.window, opts.against)
        finally:
            shutil.rmtree(home, ignore_errors=True)
        return 0
    if opts.full_speed:
        home = Path(tempfile.mkdtemp(prefix="bench-costs-"))
        try:
            full_speed(home / "redis", opts.full_speed)
        finally:
            shutil.rmtree(home, ignore_errors=True)
        return 0
    counts = [1, 48] if opts.quick else [1, 8, 48]
    home = Path(tempfile.mkdtemp(prefix="bench-costs-"))
    mongo = EmbeddedMongo(home / "mongo")
    mongo.ensure()
    rows = []
    try:
        print(f"frontier_costs: {opts.workers} workers (CONCURRENT_REQUESTS=4), a shop of {opts.pages} listing pages "
              f"(0.05 s each), MAX_IDLE_TIME_BEFORE_CLOSE={opts.idle_close}; {opts.idle_workers} idle workers; "
              f"windows of {opts.window:.0f} s")
        print(f"{'layout':>16} {'parts':>5} {'own us/s':>8} | {'crawl us/page':>13} {'(raw)':>6} {'cmds/page':>9} "
              f"{'cmd us/page':>11} {'seconds':>7} {'fetches':>7} | {'idle us/worker-s':>16} {'cmds/worker-s':>13} "
              f"{'(counted)':>9}"
              "  commands per crawl worker")
        for cluster in (False, True):
            for partitions in counts:
                r = run_layout(home, cluster, partitions, opts, mongo.url())
                rows.append(r)
                print(f"{r['layout']:>16} {partitions:>5} {r['server_idle_us_per_s']:>8.0f} | {r['us_per_page']:>13.0f} "
                      f"{r['us_per_page_raw']:>6.0f} {r['commands_per_page']:>9.1f} {r['command_us_per_page']:>11.0f} "
                      f"{r['seconds']:>7.1f} {r['fetches']:>7} | "
                      f"{r['idle_us_per_worker_s']:>16.0f} {r['idle_commands_per_worker_s']:>13.1f} "
                      f"{r['idle_counted_per_worker_s']:>9.1f}  {r['per_worker']}  runs: {r['us_per_page_runs']}  "
                      f"idle turns: {r['idle_us_runs']}", flush=True)
    finally:
        mongo.stop()
        shutil.rmtree(home, ignore_errors=True)
    base = next(r for r in rows if r["layout"] == "one redis-server" and r["partitions"] == 1)
    print("\n(own: the servers' own CPU per second with no client, summed over the masters (a cluster's gossip). "
          "crawl: Redis CPU from before the workers start to after the last closes, per listing page fetched, the "
          "servers' own taken off (raw: with it). cmd us/page: INFO commandstats' time over the crawl, per page (no "
          "idle CPU in it, so steadier; a script's commands counted in it and in their own rows). idle: what an idle "
          "worker adds per second, the servers' own (the workers stopped, before and after each turn) taken off, the "
          "median turn; counted: the commands the workers counted themselves)")
    short = []
    for r in rows:
        if r["partitions"] == 48:
            ok = r["idle_us_per_worker_s"] < GOAL_IDLE_US
            print(f"idle at 48 partitions, {r['layout']}: {r['idle_us_per_worker_s']:.0f} us per worker-second, goal < "
                  f"{GOAL_IDLE_US:.0f}: {'met' if ok else 'SHORT'}")
            short += [] if ok else [f"idle ({r['layout']})"]
        if r["layout"] != "one redis-server":
            ratio = r["us_per_page"] / base["us_per_page"]
            ok = ratio <= GOAL_CLUSTER
            print(f"cluster, {r['partitions']} partitions: {ratio:.2f}x the CPU per page of one redis-server with one "
                  f"partition, goal <= {GOAL_CLUSTER}x: {'met' if ok else 'SHORT'} (raw, with the servers' own: "
                  f"{r['us_per_page_raw'] / base['us_per_page_raw']:.2f}x; in the commands' time: "
                  f"{r['command_us_per_page'] / base['command_us_per_page']:.2f}x)")
            short += [] if ok else [f"cluster at {r['partitions']} partitions"]
    if opts.json:
        Path(opts.json).write_text(json.dumps(rows, indent=1))
    print("\n" + ("goals met" if not short else "goals short: " + "; ".join(short)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
