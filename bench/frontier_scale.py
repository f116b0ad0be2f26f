"""Frontier scale benchmark (#17): Redis CPU per page, how it moves with the queue and the domains, and
what 3 Redis Cluster masters give against one.

No HTTP and no Scrapy: simulated workers (processes) drive crawlhub's own frontier
(:class:`crawlhub.frontier.partitions.Partitions`, the tick script and the rest) the way a worker does:
lease a batch of B requests, and with the next round send, per page leased, L links of which a share
S were never seen (the rest are duplicates the filter drops), the download's end (its domain's slot
frees, outcome "ok") and the page's ack. With L=10 and S=0.1
the queue holds its size while the run goes on.

Figures, each against its goal:

* Redis CPU per page (leased, its links enqueued, acked), from INFO commandstats: the usec of every
  script call (its inner commands included) plus the commands the workers send outside scripts (the
  exact filter's SISMEMBER read of the links first; a partitioned round's reads and hint writes, at
  their command's mean usec), over the pages. The
  server's main-thread CPU (INFO cpu, sockets included) is printed next to it. Goal: at most 30 us,
  a ceiling above 33k pages/s per shard. The implied ceiling is 1e6 / (us per page) pages/s; per
  partition it is the same figure (a partition is one slot: it can have a whole shard), per shard
  it is shared by the partitions the shard holds. The workers keep crawlhub's local filter
  (FRONTIER_LOCAL_FILTER_SIZE): of each page's 10 links, 1 is new, 4 are the site's menu and
  pagination (met on every page of the site: the local filter drops them once seen), 5 are pages met
  anywhere in the crawl (200,000 of them: the shared filter in Redis finds them).
* Cost growth: the same, with the queue at 10k .. 10M requests (1,000 domains) and with 10 .. 100k
  domains (1M requests; --quick: 100k); goal: within 1.5x of the smallest.
* 3 masters against 1: the same partitioned frontier (24 partitions, their slots placed evenly) on a
  1-master and on a 3-master local Redis Cluster. Each master's CPU is measured; the cluster's ceiling
  is pages / (CPU seconds of its busiest master): what it does when its masters, not the clients, are
  the limit. Goal: 3 masters >= 2.5x one. On a 2-core machine the wall-clock pages/s of the clients
  (printed too) cannot show it: the simulated workers and the masters share the two cores.

    .venv/bin/python -m bench.frontier_scale            # queue to 10M requests, ~15 min on 2 cores
    .venv/bin/python -m bench.frontier_scale --quick    # queue to 1M, ~6 min
    .venv/bin/python -m bench.frontier_scale --phases   # only what each kind of work costs a tick, ~1 min
    .venv/bin/python -m bench.frontier_scale --profile  # one row under perf: where the server's time goes, ~1 min

--phases drives the tick with one kind of work at a time (lease 32, end 32 downloads, ack 32, queue 32 new
links, nothing) and prints, per call, the script's usec, its commands and their usec, and the rest: Lua and
the calls' glue. It says where a page's microseconds go (docs/benchmarks.md, "#30, 2026-11-26").

--profile [QUEUED,DOMAINS] runs one row (by default 100,000 domains of one request each; --partitions, 1 by
default) after a warm-up window under ``perf record`` on its redis-server, and splits the window's Redis us a page
by the samples' call stacks: each command the scripts run, the workers' commands outside scripts, redis.call's
glue, and the Lua interpreter's parts (its collector, strings, cjson). It needs perf; Lua's own functions are
named only by a redis-server built with symbols (--redis-server PATH), Debian's puts them all in "Lua: the rest"
(docs/benchmarks.md, "#30, 2026-11-28 (night)").

Each configuration runs a warm-up window, then 3 measured windows; the median window is reported (this
machine's run-to-run noise is about +-20%). Every server is started here, on 127.0.0.1, with persistence
off, and stopped at the end.
"""

from __future__ import annotations

import argparse
import inspect
import json
import multiprocessing
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import redis

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

SPIDER = "scale"
BUCKETS = 32768  # the filter's sets for 10M URLs, over every partition (docs: buckets >= URLs / partitions / 400)


def buckets(partitions: int) -> int:
    """DUPEFILTER_BUCKETS (a partition's sets) for BUCKETS in all: the same sets and memory on every layout."""
    return -(-BUCKETS // partitions)
BATCH, LINKS, NEW_SHARE = 32, 10, 0.1
LOCAL_FILTER = 100_000  # FRONTIER_LOCAL_FILTER_SIZE's default
GOAL_US, GOAL_GROWTH, GOAL_SCALE = 30.0, 1.5, 2.5
CLUSTER_PARTITIONS = 24


# -- servers -----------------------------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PlainRedis:
    def __init__(self, home: Path, binary: str = "redis-server"):
        self.port = free_port()
        self.proc = subprocess.Popen([binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                                      "--appendonly", "no", "--dir", str(home)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(100):
            try:
                if redis.Redis(port=self.port).ping():
                    break
            except redis.ConnectionError:
                time.sleep(0.05)

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()


def cpu_seconds(port: int) -> float:
    info = redis.Redis(port=port).info("cpu")
    return float(info["used_cpu_user_main_thread"]) + float(info["used_cpu_sys_main_thread"])


DIRECT = ("exists", "get", "zrangebyscore", "zrange", "zcard")  # a partitioned round's reads (Partitions._prepare)


def commandstats(port: int) -> dict[str, tuple[int, int]]:
    """command -> (calls, usec), from INFO commandstats."""
    stats = redis.Redis(port=port).info("commandstats")
    return {k[8:]: (int(v["calls"]), int(v["usec"])) for k, v in stats.items() if k.startswith("cmdstat_")}


def command_usec(before: dict, after: dict, rounds: int, hints: int) -> float:
    """Redis CPU by INFO commandstats: every script call's usec (its inner commands included) plus the
    commands the workers sent outside scripts (a partitioned round's reads and hint writes), each at
    its command's mean usec (the same commands also run inside scripts, so their totals are shared)."""
    def delta(name: str) -> tuple[int, int]:
        c0, u0 = before.get(name, (0, 0))
        c1, u1 = after.get(name, (0, 0))
        return c1 - c0, u1 - u0

    # the exact filter's read first (Partitions.unknown: pipelined SISMEMBER, no script) is the workers' alone
    total = float(delta("evalsha")[1]) + delta("sismember")[1]
    for name, count in [*((n, rounds) for n in DIRECT), ("zadd", hints)]:
        calls, usec = delta(name)
        total += count * (usec / calls if calls else 0.0)
    return total


# -- the frontier, as a worker would hold it -------------------------------------------------------------
def make_keys(partitions: int, cluster: bool):
    from scrapy.settings import Settings

    from crawlhub.frontier.keys import Keys

    return Keys.for_spider(Settings({"DUPEFILTER_BUCKETS": buckets(partitions)}), SPIDER, partitions=partitions,
                           cluster=cluster)


def make_partitions(client, partitions: int, cluster: bool):
    from crawlhub.frontier.dupefilter import ExactFilter
    from crawlhub.frontier.partitions import Partitions

    keys = make_keys(partitions, cluster)
    filters = [ExactFilter(part.dupefilter, buckets(partitions)) for part in keys.parts]
    # crawlhub's default politeness but the rate (DOMAIN_CONCURRENCY 8, FRONTIER_DOMAINS_PER_LEASE 16): the
    # rate is off so that Redis, not the domains' pace, is measured
    from crawlhub import default_settings as defaults

    options = {"filters": filters, "recheck": 0.2, "link_hold": getattr(defaults, "FRONTIER_LINK_HOLD", None),
               "link_batch": getattr(defaults, "FRONTIER_LINK_BATCH", None),
               "per_lease": getattr(defaults, "FRONTIER_PARTITIONS_PER_LEASE", None),
               "per_call": getattr(defaults, "FRONTIER_LEASES_PER_PARTITION", None)}
    # (this file copied into an older checkout, to measure its code on this workload: the options it knows)
    known = inspect.signature(Partitions).parameters
    return Partitions(client, keys, {"rate": 0, "concurrency": 8, "burst": 1, "base": 0.5, "recheck": 1.0}, 16,
                      **{k: v for k, v in options.items() if k in known and v is not None})


def payload(domain: str, n: int) -> bytes:
    """A request as crawlhub's serializer writes one (about the same size)."""
    return json.dumps({"url": f"https://{domain}/catalogue/item-{n}/index.html", "callback": "parse",
                       "meta": {"depth": 3, "download_slot": domain}, "priority": 0},
                      separators=(",", ":")).encode()


def fill(client, partitions: int, cluster: bool, queued: int, domains: list[str]) -> None:
    """Queue ``queued`` requests over ``domains`` and put as many fingerprints in the filter, in bulk
    (what the crawl would have built; the tick script's own layout, so the run reads it as its own)."""
    keys = make_keys(partitions, cluster)
    per = max(1, queued // len(domains))
    pipe = client.pipeline(transaction=False)
    sent = 0
    for i, d in enumerate(domains):
        part = keys.part_of(d)
        n = per if i < len(domains) - 1 else queued - per * (len(domains) - 1)
        for start in range(0, n, 2000):
            pipe.rpush(f"{part.queue}:{d}:0", *(payload(d, j) for j in range(start, min(n, start + 2000))))
            sent += 1
        pipe.zadd(f"{part.queue}:{d}", {"0": 0})
        pipe.hset(part.queued, d, n)
        pipe.zadd(part.schedule, {d: 0})
        pipe.incrby(part.seen, n)
        sent += 1
        if sent >= 200:
            pipe.execute()
            sent = 0
    # the filter: as many 64-bit fingerprints, spread over every partition's buckets
    rng = random.Random(1)
    per_bucket = max(1, queued // (buckets(partitions) * partitions))
    for part in keys.parts:
        for bucket in range(buckets(partitions)):
            pipe.sadd(f"{part.dupefilter}:{bucket:x}", *(rng.getrandbits(63) for _ in range(per_bucket)))
            sent += 1
            if sent >= 500:
                pipe.execute()
                sent = 0
    pipe.execute()


def worker_loop(args: tuple) -> tuple[int, int, int, int, int]:
    """One simulated worker: (pages leased, enqueued and acked; links sent to Redis; links dropped in the worker;
    partitioned rounds; hint writes)."""
    from redis.cluster import ClusterNode

    try:  # crawlhub's cluster client, as a worker has (its pipelines route script calls without COMMAND GETKEYS)
        from crawlhub.connection import CrawlhubCluster as RedisCluster
    except ImportError:  # (this file copied into an older checkout)
        from redis.cluster import RedisCluster

    from crawlhub.frontier.dupefilter import RecentFingerprints
    from crawlhub.frontier.records import EnqueueOp, Finish, lease_domain

    nodes, partitions, cluster, seconds, seed, domains, old, nav, local = args
    rng = random.Random(seed)
    client = (RedisCluster(startup_nodes=[ClusterNode("127.0.0.1", p) for p in nodes]) if cluster
              else redis.Redis(port=nodes[0]))
    parts = make_partitions(client, partitions, cluster)
    recent = RecentFingerprints(LOCAL_FILTER) if local else None
    pages, sent, dropped, acks, enq, safe, fin = 0, 0, 0, [], [], [], []
    rounds, hints = 0, 0
    counter = seed * 10_000_000
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        result = parts.tick(enq, fin, acks, BATCH, f"w{seed}", 60.0, 0, 1, None, safe_acks=safe)
        if not parts.single:  # the round's reads (pause, budget, the hint) and its hint writes
            rounds += 1
            hints += 1
        safe = result.deferred_ack  # acks held one round (links in other partitions): sent with the next
        pages += result.tick.acked
        sent += len(enq)
        acks, enq, fin = [], [], []
        for taken in result.tick.taken:
            d = lease_domain(taken.lease_id)
            links = []
            for k in range(LINKS):
                if k < round(LINKS * NEW_SHARE):  # new: mostly the same site, some elsewhere
                    counter += 1
                    target = rng.choice(domains) if rng.random() < 0.2 else d
                    links.append((os.urandom(20), target, counter))
                elif k < LINKS // 2 + 1:  # the site's menu and pagination: on every page of the site
                    links.append((nav[d][rng.randrange(len(nav[d]))], d, k))
                else:  # a page met before anywhere in the crawl
                    fp, target = old[rng.randrange(len(old))]
                    links.append((fp, target, k))
            for fp, target, n in links:
                if recent is not None:
                    key = recent.key(fp)
                    if key in recent:
                        dropped += 1
                        continue
                    recent.add(key)
                enq.append(EnqueueOp(fp, payload(target, n), 0, False, "", target))
            fin.append(Finish(d, taken.lease_id, "ok"))  # the download is over: its slot frees (the worker's warden)
            acks.append(taken.lease_id)
    # the window is over: its last pages end (held links and acks too), as a worker's close does
    if hasattr(parts, "drain"):  # (an older checkout's Partitions holds no links)
        parts.drain()
    for _ in range(2):
        result = parts.tick(enq, fin, acks, 0, f"w{seed}", 60.0, 0, 1, None, safe_acks=safe)
        pages += result.tick.acked
        enq, acks, safe, fin = [], [], result.deferred_ack, []
    return pages, sent, dropped, rounds, hints


WINDOWS = 3  # measured windows per configuration (after one warm-up window); the median is reported


def run_workload(ports: list[int], partitions: int, cluster: bool, workers: int, seconds: float,
                 domains: list[str], old, nav, local: bool = True) -> dict:
    """A warm-up window (scripts loaded, caches warm), then WINDOWS windows of ``seconds / WINDOWS``;
    the window with the median cost per page is returned (this machine's noise is +-20% run to run)."""
    window = max(1.0, seconds / WINDOWS)
    measure_window(ports, partitions, cluster, workers, window / 2, domains, old, nav, local)
    runs = sorted((measure_window(ports, partitions, cluster, workers, window, domains, old, nav, local)
                   for _ in range(WINDOWS)), key=lambda r: r["us_per_page"])
    median = runs[len(runs) // 2]
    median["windows"] = [round(r["us_per_page"], 1) for r in runs]
    return median


def measure_window(ports: list[int], partitions: int, cluster: bool, workers: int, seconds: float,
                   domains: list[str], old, nav, local: bool = True) -> dict:
    before = {p: (cpu_seconds(p), commandstats(p)) for p in ports}
    started = time.monotonic()
    with multiprocessing.get_context("fork").Pool(workers) as pool:
        out = pool.map(worker_loop, [(ports, partitions, cluster, seconds, i + 1, domains, old, nav, local)
                                     for i in range(workers)])
    wall = time.monotonic() - started
    after = {p: (cpu_seconds(p), commandstats(p)) for p in ports}
    pages, sent, dropped = (sum(o[i] for o in out) for i in range(3))
    rounds, hints = (sum(o[i] for o in out) for i in (3, 4))
    cpu = {p: after[p][0] - before[p][0] for p in ports}
    # the direct commands are spread over the masters in proportion to their script time (an estimate)
    usec = {p: command_usec(before[p][1], after[p][1], 0, 0) for p in ports}
    direct = command_usec({}, {}, 0, 0)
    scripts = sum(usec.values())
    if rounds or hints:
        merged_before = {n: tuple(sum(before[p][1].get(n, (0, 0))[i] for p in ports) for i in range(2)) for n in
                         {n for p in ports for n in before[p][1]} | {n for p in ports for n in after[p][1]}}
        merged_after = {n: tuple(sum(after[p][1].get(n, (0, 0))[i] for p in ports) for i in range(2))
                        for n in merged_before}
        direct = command_usec(merged_before, merged_after, rounds, hints) - scripts
    per_port = {p: usec[p] + direct * (usec[p] / scripts if scripts else 1 / len(ports)) for p in ports}
    # every command the masters ran (a script's inner commands too), and their usec: what a command costs on average
    ran = [(after[p][1][n][0] - before[p][1].get(n, (0, 0))[0], after[p][1][n][1] - before[p][1].get(n, (0, 0))[1])
           for p in ports for n in after[p][1] if n != "evalsha" and not n.startswith(("info", "config"))]
    return {"pages": pages, "wall": wall, "cpu": cpu, "usec": per_port,
            "us_per_page": sum(per_port.values()) / max(1, pages),
            "cpu_us_per_page": sum(cpu.values()) * 1e6 / max(1, pages), "pages_per_s": pages / max(1e-9, wall),
            "sent_per_page": sent / max(1, pages), "local_share": dropped / max(1, sent + dropped),
            "commands_per_page": sum(c for c, _ in ran) / max(1, pages),
            "us_per_command": sum(u for _, u in ran) / max(1, sum(c for c, _ in ran))}


def seed_duplicates(client, partitions: int, cluster: bool, names: list[str]) -> tuple[list, dict]:
    """Links the workers meet again: ``old`` (pages met anywhere in the crawl: 200,000 (fingerprint,
    domain) pairs) and ``nav`` (per domain, 30 menu and pagination links), each put in the filter of
    its domain's partition, as the crawl would have."""
    from crawlhub.frontier.dupefilter import ExactFilter

    keys = make_keys(partitions, cluster)
    filters = [ExactFilter(part.dupefilter, buckets(partitions)) for part in keys.parts]
    rng = random.Random(2)
    old = [(rng.randbytes(20), rng.choice(names)) for _ in range(200_000)]
    nav = {d: [rng.randbytes(20) for _ in range(30)] for d in names}
    pipe = client.pipeline(transaction=False)
    pairs = old + [(fp, d) for d, fps in nav.items() for fp in fps]
    for i, (fp, d) in enumerate(pairs):
        spec = filters[keys.partition_of(d)].spec(fp)
        pipe.sadd(spec[1], spec[2])
        if i % 5000 == 4999:
            pipe.execute()
    pipe.execute()
    return old, nav


def domain_names(n: int) -> list[str]:
    return [f"shop{i}.example" for i in range(n)]


# -- one shard: cost per page, and its growth ------------------------------------------------------------
def single_shard(home: Path, queued: int, domains: int, seconds: float, workers: int, partitions: int = 1,
                 local: bool = True) -> dict:
    server = PlainRedis(home)
    try:
        client = redis.Redis(port=server.port)
        names = domain_names(domains)
        t = time.monotonic()
        fill(client, partitions, False, queued, names)
        old, nav = seed_duplicates(client, partitions, False, names)
        filled = time.monotonic() - t
        result = run_workload([server.port], partitions, False, workers, seconds, names, old, nav, local)
        result.update(queued=queued, domains=domains, fill_s=filled, local=local,
                      memory_mb=client.info("memory")["used_memory"] / 2**20)
        return result
    finally:
        server.stop()


# -- a cluster: masters against one ------------------------------------------------------------------------
def place_evenly(cluster, partitions: int) -> list[int]:
    """Every master with its share of the partitions (crawlhub's own placement: placed tags, and
    ``crawlhub partitions --balance``'s moves where a cluster is uneven); the partitions per master."""
    from crawlhub.frontier.placement import holders, move_slot, plan

    keys, client = make_keys(partitions, True), cluster.client()
    for move in plan(holders(client, keys), keys):
        move_slot(client, move.slot, move.source, move.target)
    return sorted(len(parts) for parts in holders(client, keys).values())


def cluster_run(home: Path, masters: int, queued: int, domains: int, seconds: float, workers: int) -> dict:
    from tests.redis_cluster import LocalRedisCluster

    with LocalRedisCluster(home / f"c{masters}", masters=masters, appendonly=False) as cluster:
        place_evenly(cluster, CLUSTER_PARTITIONS)
        client = cluster.client()
        names = domain_names(domains)
        fill(client, CLUSTER_PARTITIONS, True, queued, names)
        old, nav = seed_duplicates(client, CLUSTER_PARTITIONS, True, names)
        ports = cluster.primaries()
        result = run_workload(ports, CLUSTER_PARTITIONS, True, workers, seconds, names, old, nav)
        busiest = max(result["usec"].values()) / 1e6
        result.update(masters=masters, ceiling=result["pages"] / busiest if busiest else 0.0,
                      share=[round(u / max(1e-9, sum(result["usec"].values())), 2) for u in result["usec"].values()])
        return result


# -- --phases: what one kind of work costs a tick ---------------------------------------------------------------
PHASES = ("lease", "finish", "ack", "enqueue", "empty")


def phase_costs(home: Path, queued: int, domains: int, rounds: int, workers: int) -> dict[str, dict[str, float]]:
    """The tick with one kind of work at a time, ``rounds`` calls of each, on one plain redis-server (one
    partition): lease BATCH requests; end those downloads ("ok"); ack those pages; queue BATCH new links (one per
    page leased, to its domain); nothing at all. Per call, from INFO commandstats: the script's usec, its inner
    commands and their usec, and the rest (Lua and the calls' glue). A second pass is reported (the first warms)."""
    from crawlhub.frontier.records import EnqueueOp, Finish, lease_domain

    server = PlainRedis(home)
    try:
        client = redis.Redis(port=server.port)
        fill(client, 1, False, queued, domain_names(domains))
        parts = make_partitions(client, 1, False)

        def tick(enq=(), fin=(), acks=(), n=0):
            return parts.tick(list(enq), list(fin), list(acks), n, "w1", 60.0, 0, workers, None)

        def measured(work) -> dict[str, float]:
            client.config_resetstat()
            work()
            stats = commandstats(server.port)
            calls, usec = stats.get("evalsha", (0, 0))
            inner = [(c, u) for name, (c, u) in stats.items() if name not in ("evalsha", "config|resetstat", "info")]
            calls = max(1, calls)
            return {"us": usec / calls, "commands": sum(c for c, _ in inner) / calls,
                    "commands_us": sum(u for _, u in inner) / calls,
                    "lua_us": (usec - sum(u for _, u in inner)) / calls}

        serial = 0

        def links(leases: list[str]) -> list:
            nonlocal serial
            out = []
            for lease in leases:
                serial += 1
                domain = lease_domain(lease)
                out.append(EnqueueOp(os.urandom(20), payload(domain, serial), 0, False, "", domain))
            return out

        def each(call) -> None:
            for leases in taken:
                call(leases)

        costs: dict[str, dict[str, float]] = {}
        taken: list[list[str]] = []  # each lease call's lease ids, for the finishes and acks that follow
        for _ in range(2):
            taken.clear()
            costs["lease"] = measured(lambda: taken.extend([t.lease_id for t in tick(n=BATCH).tick.taken]
                                                           for _ in range(rounds)))
            costs["lease"]["per_call"] = sum(map(len, taken)) / rounds
            costs["finish"] = measured(lambda: each(lambda leases: tick(fin=[Finish(lease_domain(x), x, "ok")
                                                                               for x in leases])))
            costs["ack"] = measured(lambda: each(lambda leases: tick(acks=leases)))
            costs["enqueue"] = measured(lambda: each(lambda leases: tick(enq=links(leases))))
            costs["empty"] = measured(lambda: each(lambda leases: tick()))
        return costs
    finally:
        server.stop()


def print_phases(home: Path, rounds: int, workers: int) -> None:
    """--phases: where a tick's microseconds go, for a queue spread over 1,000 domains and over 100,000 domains
    with one request each (the domain sweep's two ends)."""
    print(f"frontier_scale --phases: {rounds} calls of each kind, {BATCH} a call, one redis-server, one partition "
          f"({workers} live workers: a domain's fair share of its 8 slots)")
    print(f"{'queued':>8} {'domains':>8} {'kind':>8} {'us/call':>8} {'commands':>9} {'their us':>9} {'Lua+glue':>9}")
    for queued, domains in ((10_000, 1_000), (100_000, 100_000)):
        costs = phase_costs(home, queued, domains, rounds, workers)
        for kind in PHASES:
            c = costs[kind]
            print(f"{queued:>8,} {domains:>8,} {kind:>8} {c['us']:>8.1f} {c['commands']:>9.1f} {c['commands_us']:>9.1f} "
                  f"{c['lua_us']:>9.1f}")
        print(f"{'':>18}(leased per call: {costs['lease']['per_call']:.1f})")


# -- a profile: where the server's time goes --------------------------------------------------------------------
# perf's samples of redis-server, each put in one part by its call stack (innermost frame first): a command a script
# runs (under scriptCall) by name; redis.call's glue (its arguments and reply converted, the command looked up); the
# Lua interpreter's own parts; the workers' SISMEMBER read outside scripts. Lua's internal functions are named only by
# a redis-server built with symbols: Debian's names Redis's functions, and the parts of Lua fall in "Lua, the rest".
LUA_PARTS = (("luaC_step", "Lua: garbage collector"), ("luaC_fullgc", "Lua: garbage collector"),
             ("str_find_aux", "Lua: string.match and find"), ("gmatch_aux", "Lua: string.match and find"),
             ("luaV_concat", "Lua: strings joined (..)"), ("str_format", "Lua: string.format"),
             ("json_decode", "Lua: cjson"), ("json_encode", "Lua: cjson"))
GLUE = "redis.call's glue (arguments, replies, command lookup)"
SCRIPT_FRAMES = {"evalGenericCommand", "luaCallFunction", "scriptCall", "luaRedisGenericCommand"}
NOT_COMMANDS = {"lookupCommand", "isInsideYieldingLongCommand"}  # (their names end so; they are not commands)


def sample_part(frames: list[str]) -> str | None:
    """The part of one sample (its frames' symbols, innermost first); None: not a command's (the event loop,
    sockets, the server's cron)."""
    if not SCRIPT_FRAMES.intersection(frames):  # (a stack cut short may miss evalGenericCommand, not all of these)
        outer = next((f for f in frames if f.endswith("Command") and f not in NOT_COMMANDS), None)
        if outer in (None, "infoCommand", "configCommand", "configResetStatCommand"):  # (the benchmark's own reads)
            return None
        return "outside scripts: their dispatch" if outer == "processCommand" else f"outside scripts: {command_name(outer)}"
    for i, f in enumerate(frames):
        if f == "scriptCall":
            inner = next((g for g in frames[:i] if g.endswith("Command")), None)
            return f"in scripts: {command_name(inner)}" if inner and inner not in NOT_COMMANDS else GLUE
        if f == "luaRedisGenericCommand":
            return GLUE
        for name, part in LUA_PARTS:
            if f == name:
                return part
    return "Lua: the rest (interpreter, tables, calls)"


def command_name(symbol: str | None) -> str:
    """zaddGenericCommand -> ZADD (push and pop: their generic functions serve LPUSH/RPUSH and LPOP/RPOP)."""
    if not symbol:
        return "?"
    name = symbol.removesuffix("Command").removesuffix("Generic")
    return {"push": "RPUSH/LPUSH", "pop": "LPOP/RPOP", "genericZrangebyrank": "ZRANGE",
            "genericZrangebyscore": "ZRANGEBYSCORE", "zrange": "ZRANGE", "expire": "EXPIRE",
            "incrDecr": "INCRBY"}.get(name, name.upper())


def perf_parts(data: Path) -> tuple[dict[str, int], int, int, bool, int]:
    """(samples per part, samples in all, samples whose stack passes getExpire (a key's expiry checked at its
    lookup), whether Lua's internal functions were named, samples whose stack reaches the event loop: the rest were
    cut short) of a perf.data file."""
    out = subprocess.run(["perf", "script", "-i", str(data), "-F", "ip,sym"], capture_output=True, text=True,
                         check=True).stdout
    parts: dict[str, int] = {}
    total = expiry = whole = 0
    named = False
    for sample in out.split("\n\n"):
        # a line: "<address> <symbol>+<offset>"; an unnamed frame has no symbol
        frames = [fields[1].split("+")[0] for fields in (line.split(None, 1) for line in sample.strip().splitlines())
                  if len(fields) > 1]
        if not frames:
            continue
        total += 1
        named = named or "luaV_execute" in frames
        expiry += "getExpire" in frames
        whole += "aeMain" in frames
        part = sample_part(frames)
        if part:
            parts[part] = parts.get(part, 0) + 1
    return parts, total, expiry, named, whole


def profile_row(home: Path, queued: int, domains: int, seconds: float, workers: int, binary: str,
                partitions: int = 1) -> None:
    """--profile: one row of the table (``partitions``: 1, the classic layout) under ``perf record`` on its
    redis-server after a warm-up; the commandstats figure of the window split by the perf samples' parts."""
    if shutil.which("perf") is None:
        sys.exit("--profile needs perf (Debian: apt-get install linux-perf)")
    server = PlainRedis(home, binary)
    try:
        client = redis.Redis(port=server.port)
        names = domain_names(domains)
        fill(client, partitions, False, queued, names)
        old, nav = seed_duplicates(client, partitions, False, names)
        measure_window([server.port], partitions, False, workers, seconds, names, old, nav)  # warm-up: scripts loaded
        data = home / "perf.data"
        # stacks unwound from DWARF (.eh_frame): Debian's redis-server keeps no frame pointers, and a stack walked by
        # them stops short of the command it is in
        freq = 499
        recorder = subprocess.Popen(["perf", "record", "-F", str(freq), "--call-graph", "dwarf,16384", "-o", str(data),
                                     "-p", str(server.proc.pid)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            for _ in range(200):  # perf has attached once its file has a header
                if data.exists() and data.stat().st_size > 0:
                    break
                time.sleep(0.05)
            r = measure_window([server.port], partitions, False, workers, seconds, names, old, nav)
        finally:  # (perf writes its file out on SIGINT)
            recorder.send_signal(signal.SIGINT)
            recorder.wait()
    finally:
        server.stop()
    parts, total, expiry, named, whole = perf_parts(data)
    counted = sum(parts.values())
    scale = r["us_per_page"] / max(1, counted)  # a sample's share of the commandstats figure
    print(f"frontier_scale --profile: {queued:,} queued over {domains:,} domains, {partitions} partition(s), "
          f"{workers} simulated workers, {seconds:.0f} s under perf ({total:,} samples at {freq} Hz, {r['pages']:,} pages)")
    print(f"Redis us/page (INFO commandstats): {r['us_per_page']:.1f}; the server's CPU by perf: "
          f"{total * 1e6 / freq / max(1, r['pages']):.1f} (sockets and the event loop too)\n")
    print(f"{'part':<58} {'us/page':>8} {'share':>6}")
    order = ("in scripts", "outside scripts")  # the commands first, then Lua and the glue, each largest first
    group = {part: next((i for i, prefix in enumerate(order) if part.startswith(prefix)), len(order)) for part in parts}
    for part in sorted(parts, key=lambda p: (group[p], -parts[p])):
        print(f"{part:<58} {parts[part] * scale:>8.2f} {parts[part] / max(1, counted):>6.1%}")
    commands = sum(n for part, n in parts.items() if group[part] < len(order))
    print(f"\nthe commands alone (in scripts and outside): {commands * scale:.1f} us/page; Lua and redis.call's glue: "
          f"{(counted - commands) * scale:.1f}; of every part, key lookups' expiry check (getExpire, paid by every "
          f"lookup once any key has a TTL): {expiry * scale:.1f}")
    if whole < total * 0.8:
        print(f"(only {whole / max(1, total):.0%} of the samples' stacks reached the event loop: the others were cut "
              "short, and their parts are missing or misplaced)")
    if not named:
        print("(this redis-server does not name Lua's internal functions: the glue and the interpreter's parts are in "
              "'Lua: the rest'. A build of the same version with symbols names them: docs/benchmarks.md)")


# -- report ------------------------------------------------------------------------------------------------
def verdict(ok: bool) -> str:
    return "meets" if ok else "FALLS SHORT of"


def growth_check(label: str, field: str, unit: str, rows: list[dict]) -> list[str]:
    """Print the cost growth from the first row to the last against its goal; the goal's name if short."""
    growth = rows[-1]["us_per_page"] / rows[0]["us_per_page"]
    ok = growth <= GOAL_GROWTH
    print(f"  {rows[0][field]:,} -> {rows[-1][field]:,} {unit}: cost x{growth:.2f}, goal <= x{GOAL_GROWTH}: "
          f"{verdict(ok)} the goal")
    return [] if ok else [f"growth with the {label}"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="smaller sizes (queue to 1M), under 10 minutes")
    parser.add_argument("--workers", type=int, default=2, help="simulated workers (processes)")
    parser.add_argument("--phases", action="store_true",
                        help="only where a tick's time goes: each kind of work alone (lease, finish, ack, enqueue, "
                             "nothing), per call, under a minute")
    parser.add_argument("--rounds", type=int, default=300, help="--phases: calls of each kind")
    parser.add_argument("--profile", metavar="QUEUED,DOMAINS", nargs="?", const="100000,100000",
                        help="only one row (default: 100,000 domains of one request; --partitions, 1 by default) "
                             "under perf: where the server's time goes, us per page by command and by part of Lua; "
                             "needs perf")
    parser.add_argument("--redis-server", default="redis-server",
                        help="--profile: the redis-server to run (a build with symbols names Lua's own functions)")
    parser.add_argument("--seconds", type=float, default=8.0, help="--profile: the warm-up's and the window's length")
    parser.add_argument("--partitions", type=int, default=1, help="--profile: the row's partitions (1: classic)")
    parser.add_argument("--cluster", action="store_true",
                        help="only the cluster's 3 masters against 1 (with --quick: its sizes), ~2 minutes")
    opts = parser.parse_args()
    home = Path(tempfile.mkdtemp(prefix="bench-scale-"))
    if opts.profile or opts.phases:
        try:
            if opts.profile:
                queued, domains = (int(x) for x in opts.profile.split(","))
                profile_row(home, queued, domains, opts.seconds, opts.workers, opts.redis_server, opts.partitions)
            else:
                print_phases(home, opts.rounds, opts.workers)
        finally:
            shutil.rmtree(home, ignore_errors=True)
        return
    queues = [10_000, 100_000, 1_000_000] if opts.quick else [10_000, 100_000, 1_000_000, 10_000_000]
    domain_sweep = [10, 1_000, 100_000]
    at_queue = 100_000 if opts.quick else 1_000_000
    seconds = 9.0 if opts.quick else 15.0
    short = []
    print(f"frontier_scale: {opts.workers} simulated workers, batch {BATCH}, {LINKS} links per page "
          f"({NEW_SHARE:.0%} new), {os.cpu_count()} cores{' (--quick)' if opts.quick else ''}")
    try:
        if not opts.cluster:
            print("\n## One shard (plain redis-server): Redis CPU per page (leased + links enqueued + acked)")
            print(f"{'layout':>14} {'queued':>10} {'domains':>8} {'pages':>8} {'pages/s':>8} {'us/page':>8} "
                  f"{'ceiling/s':>10} {'cpu us':>7} {'sent/p':>6} {'local':>6} {'MB':>7}  windows (us/page)")
            rows = []
            for partitions in (1, 8):
                for q in queues:
                    r = single_shard(home, q, 1_000, seconds, opts.workers, partitions)
                    rows.append(("queue", partitions, r))
                for d in domain_sweep:
                    if d == 1_000 and at_queue in queues:
                        r = next(x for kind, p, x in rows if kind == "queue" and p == partitions and x["queued"] == at_queue)
                    else:
                        r = single_shard(home, at_queue, d, seconds, opts.workers, partitions)
                    rows.append(("domains", partitions, r))
            for kind, partitions, r in rows:
                if kind == "domains" and r["domains"] == 1_000 and r["queued"] == at_queue:
                    continue
                label = "classic" if partitions == 1 else f"{partitions} partitions"
                print(f"{label:>14} {r['queued']:>10,} {r['domains']:>8,} {r['pages']:>8,} {r['pages_per_s']:>8,.0f} "
                      f"{r['us_per_page']:>8.1f} {1e6 / r['us_per_page']:>10,.0f} {r['cpu_us_per_page']:>7.1f} "
                      f"{r['sent_per_page']:>6.1f} {r['local_share']:>6.0%} {r['memory_mb']:>7.0f}  {r['windows']}")
            print("(us/page: INFO commandstats, scripts with their inner commands plus what the workers send outside "
                  "scripts; cpu us: the main thread's CPU, sockets included; sent/p: links per page sent to Redis after "
                  "the worker's local filter, which dropped the share in 'local')\n")
            for partitions in (1, 8):
                label = "classic" if partitions == 1 else f"{partitions} partitions"
                mine = [r for kind, p, r in rows if p == partitions]
                worst = max(r["us_per_page"] for r in mine)
                ok = worst <= GOAL_US
                print(f"Redis CPU per page ({label}): at most {worst:.1f} us over every size, goal <= {GOAL_US:.0f} us: "
                      f"{verdict(ok)} the goal (ceiling {1e6 / worst:,.0f} pages/s per shard, "
                      f"{1e6 / worst * 86400 / 1e9:.2f} billion pages a day)")
                if not ok:
                    short.append(f"CPU per page ({label})")
                by_queue = [r for kind, p, r in rows if p == partitions and kind == "queue"]
                short += growth_check(f"queue ({label})", "queued", "requests", by_queue)
                by_domains = sorted((r for kind, p, r in rows if p == partitions and kind == "domains"),
                                    key=lambda r: r["domains"])
                short += growth_check(f"domains ({label})", "domains", "domains", by_domains)

        print(f"\n## Redis Cluster: {CLUSTER_PARTITIONS} partitions placed evenly, {at_queue:,} queued, 1,000 domains, "
              f"{opts.workers} simulated workers")
        one = cluster_run(home, 1, at_queue, 1_000, seconds, opts.workers)
        three = cluster_run(home, 3, at_queue, 1_000, seconds, opts.workers)
        for r in (one, three):
            print(f"  {r['masters']} master(s): {r['pages']:,} pages in {r['wall']:.1f}s ({r['pages_per_s']:,.0f} pages/s "
                  f"measured, client-bound here), Redis {r['us_per_page']:.1f} us/page (cpu {r['cpu_us_per_page']:.1f}), "
                  f"share per master {r['share']}, ceiling {r['ceiling']:,.0f} pages/s (pages / busiest master's "
                  f"seconds); windows {r['windows']} us/page")
        scale = three["ceiling"] / one["ceiling"] if one["ceiling"] else 0.0
        ok = scale >= GOAL_SCALE
        print(f"3 masters against 1: x{scale:.2f} the ceiling, goal >= x{GOAL_SCALE}: {verdict(ok)} the goal "
              f"(measured pages/s x{three['pages_per_s'] / max(1, one['pages_per_s']):.2f}: the clients share 2 cores "
              "with the masters)")
        if not ok:
            short.append("3 masters against 1")
        # the same work, spread: the commands a page are the design's, a command's cost is also this machine's (3
        # masters and the workers on 2 cores: every command costs more, an O(1) SISMEMBER too)
        spread = 1 / max(three["share"]) if three["share"] else 0.0
        print(f"  commands a page (every master, a script's inner ones too): {one['commands_per_page']:.2f} on 1 master, "
              f"{three['commands_per_page']:.2f} on 3; a command's mean usec x{three['us_per_command'] / max(1e-9, one['us_per_command']):.2f} "
              f"on 3. At one master's cost a command, the busiest master's share {max(three['share'])} gives x{spread:.2f} "
              f"(goal >= x{GOAL_SCALE}: {verdict(spread >= GOAL_SCALE)} it): the spread of the work, what 3 masters on "
              "cores of their own would give")
    finally:
        shutil.rmtree(home, ignore_errors=True)
    print("\n" + ("goal met" if not short else "goals short: " + "; ".join(short)))


if __name__ == "__main__":
    main()
