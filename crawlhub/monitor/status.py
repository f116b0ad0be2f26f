"""A crawl's state as data: what `crawlhub status --json` prints and the UI serves (docs/cli.md).

All of it comes from Redis (frontier keys, crawlhub.stats counters and
stream, worker heartbeats) and MongoDB (items per collection).
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

import redis
from redis.cluster import RedisCluster
from scrapy.settings import BaseSettings

from crawlhub.downloadermiddlewares.robots import robots_state
from crawlhub.frontier.epoch import Epoch
from crawlhub.frontier.keys import Keys
from crawlhub.frontier.operations import partition_counts, per_partition, queued_per_domain
from crawlhub.frontier.partitions import frontier_keys, partitioned_frontiers
from crawlhub.frontier.politeness import Politeness, domain_state, get_limit, known_domains
from crawlhub.frontier.records import text
from crawlhub.items import cycle_field
from crawlhub.ladder import ladder_rows, read_ladder
from crawlhub.proxies import proxy_health
from crawlhub.quality import quality_report
from crawlhub.roles import lane_backlog, split_queue
from crawlhub.seeds import WrongSeedKey, count_seeds
from crawlhub.sessions import read_sessions
from crawlhub.stats import LATENCY_BUCKETS_MS, items_field, minute_key, percentile

if TYPE_CHECKING:
    from pymongo import MongoClient

CLASSES = ("2xx", "3xx", "4xx", "5xx", "error")


def spider_keys(settings: BaseSettings, spider: str) -> dict[str, str]:
    """Every Redis key crawlhub keeps for a spider (docs/redis-keys.md)."""
    return Keys.for_spider(settings, spider).names()


def ints(raw: Mapping[bytes | str, Any]) -> dict[str, int]:
    return {text(k): int(v) for k, v in raw.items()}


def _histogram(counts: dict[str, int], prefix: str = "") -> dict[str, int]:
    return {b: counts.get(f"{prefix}lat:{b}", 0) for b in [*map(str, LATENCY_BUCKETS_MS), "inf"]}


def recent_minutes(server: redis.Redis, spider: str, now: float, minutes: int = 6) -> dict[int, dict[str, int]]:
    current = int(now // 60)
    pipe = server.pipeline(transaction=False)
    wanted = list(range(current - minutes + 1, current + 1))
    for m in wanted:
        pipe.hgetall(minute_key(spider, m))
    return {m: ints(raw) for m, raw in zip(wanted, pipe.execute(), strict=True)}


def pages_per_minute(minutes: dict[int, dict[str, int]], now: float, window: int, started: float = 0.0) -> float:
    """Responses per minute over the last ``window`` minutes, or since ``started`` if that is later.

    Counts come in minute buckets: a bucket wholly inside the window counts
    whole, the one the window starts in counts for the part inside it.
    """
    since = max(now - window * 60, started or 0.0)
    span = max(now - since, 1.0)
    total = 0.0
    for m in range(int(since // 60), int(now // 60) + 1):
        counts = minutes.get(m, {})
        pages = sum(counts.get(c, 0) for c in CLASSES[:4])
        inside = 1.0 if since == started or m * 60 >= since else (m * 60 + 60 - since) / 60
        total += pages * inside
    return total / span * 60


def worker_rows(raw: Mapping[Any, Any], now: float, dead_after: float) -> list[dict[str, Any]]:
    rows = []
    for value in raw.values():
        w = json.loads(value)
        w["alive"] = w.get("state") == "running" and now - w.get("last_beat", 0) <= dead_after
        if w.get("state") == "running" and not w["alive"]:
            w["state"] = "dead"
        rows.append(w)
    return sorted(rows, key=lambda w: w.get("started_at", 0))


def item_counts(settings: BaseSettings, spider: str, items_stored: int, mongo: MongoClient[Any] | None = None, epoch: str = "") -> dict[str, Any]:
    """Documents per collection of MONGO_DATABASE, the spider's quarantined items, and the valid share
    (through ``mongo``, a pymongo client kept by the caller, else one opened and closed here). With the
    frontier's ``epoch`` id, ``crawl``: the spider's documents stored in that epoch (``cycles.<spider>``)."""
    from crawlhub.connection import get_mongo, mongo_error

    try:
        client = mongo or get_mongo(settings, 3000)
        db = client[settings.get("MONGO_DATABASE")]
        quarantine = settings.get("MONGO_QUARANTINE_COLLECTION")
        names = sorted(db.list_collection_names())
        # this spider's documents only (every stored document lists the spiders that stored it)
        stored = {name: n for name in names if name != quarantine and not name.startswith(("system.", "_"))
                  and (n := db[name].count_documents({"spiders": spider}))}
        marked = {cycle_field(spider): epoch}
        crawl = sum(db[name].count_documents(marked) for name in stored) if epoch else None
        quarantined = db[quarantine].count_documents({"spider": spider}) if quarantine in names else 0
        status_name = settings.get("STATUS_COLLECTION", "url_status")
        revisit = None
        if status_name in names and (pages := db[status_name].count_documents({"spider": spider})):
            due = db[status_name].count_documents({"spider": spider, "next_fetch": {"$lte": time.time()}})
            revisit = {"pages": pages, "due_now": due, "fresh": pages - due}
        if mongo is None:
            client.close()
    except Exception as exc:  # pymongo's errors, or the embedded server not starting: shown, not fatal
        return {"error": f"MongoDB unavailable: {mongo_error(exc)}"}
    good = items_stored if crawl is None else crawl  # the store's count when it has one, as status shows
    checked = good + quarantined
    return {"database": settings.get("MONGO_DATABASE"), "stored": stored, "crawl": crawl, "quarantined": quarantined,
            "valid_share": round(good / checked, 4) if checked else None, "revisit": revisit}


def has_frontier(server: redis.Redis, settings: BaseSettings, spider: str) -> bool:
    """Whether ``spider`` has crawl state in this Redis (workers, seeds, a layout or a queue)."""
    k = frontier_keys(server, settings, spider)
    return bool(server.exists(k.workers, k.seeds, k.layout, *(part.queued for part in k.parts)))


def cluster_status(server: redis.Redis, settings: BaseSettings, spider: str, with_items: bool = True, mongo: MongoClient[Any] | None = None) -> dict[str, Any]:
    """Everything `crawlhub status SPIDER` shows, as JSON-able data (docs/cli.md)."""
    now = time.time()
    layout = frontier_keys(server, settings, spider)
    keys = layout.names()
    counts = partition_counts(server, layout.parts)
    per_domain = queued_per_domain(server, layout)
    inflight, delayed, dlq, seen = counts["inflight"], counts["delayed"], counts["dlq"], counts["seen"]
    pipe = server.pipeline(transaction=False)
    pipe.llen(keys["bad_seeds"])
    pipe.llen(keys["bad_requests"])
    pipe.get(keys["budget"])
    pipe.get(keys["budget_used"])
    pipe.hgetall(keys["stats"])
    pipe.hgetall(keys["workers"])
    pipe.hgetall(keys["stats_totals"])
    pipe.exists(keys["paused"])
    pipe.xlen(keys["log"])
    pipe.lrange(keys["incidents"], 0, 9)
    pipe.get(keys["epoch"])
    pipe.xrevrange(keys["log"], count=1)
    (bad_seeds, bad_requests, budget, budget_used, counters, workers, totals, paused, logged,
     incidents, current, last_logged) = pipe.execute()
    problems = []
    try:
        seeds = count_seeds(server, keys["seeds"])
    except WrongSeedKey as exc:  # this spider's alone: shown with it, never an error for the whole overview
        seeds, problems = 0, [str(exc)]
    totals = ints(totals)
    current = Epoch.parse(current)
    # the documents stored in this epoch, as the workers counted them (crawlhub.signals.items_stored); with
    # with_items, replaced below by the store's count of the same
    totals["items"] = totals.get(items_field(current.id), 0) if current else 0
    heartbeat = settings.getfloat("WORKER_HEARTBEAT_INTERVAL")
    dead_after = settings.getfloat("WORKER_DEAD_AFTER") or 3 * heartbeat
    workers = worker_rows(workers, now, dead_after)
    minutes = recent_minutes(server, spider, now)
    alive = [w for w in workers if w["alive"]]
    # the rates of the crawl going on now: counted from its live workers' start, 0 when none is alive
    started = min((w.get("started_at", now) for w in alive), default=0.0)
    rate1, rate5 = ((pages_per_minute(minutes, now, 1, started), pages_per_minute(minutes, now, 5, started))
                    if alive else (0.0, 0.0))
    queued = sum(per_domain.values())
    lanes = lane_backlog(per_domain, alive)  # work queued for a rung (crawlhub.roles), and who takes it
    problems += [f"{row['queued']} requests wait in the {row['lane']} lane and no live worker takes it: start a worker "
                 f"with WORKER_CAPABILITIES={row['lane']}" for row in lanes if not row["workers"]]
    per_host: dict[str, int] = {}  # (a domain's lanes counted with it)
    for q, n in per_domain.items():
        per_host[split_queue(q)[0]] = per_host.get(split_queue(q)[0], 0) + n
    domains = sorted({k.split("|")[1] for k in totals if k.startswith("d|")} | set(per_host))
    domain_rows = []
    for d in domains:
        prefix = f"d|{d}|"
        requests = totals.get(prefix + "requests", 0)
        ok = totals.get(prefix + "2xx", 0) + totals.get(prefix + "3xx", 0)
        hist = _histogram(totals, prefix)
        domain_rows.append({
            "domain": d, "requests": requests, "queued": per_host.get(d, 0),
            **{c: totals.get(prefix + c, 0) for c in CLASSES},
            "success_rate": round(ok / requests, 4) if requests else None,
            "p50_ms": percentile(hist, 0.5), "p95_ms": percentile(hist, 0.95), "bytes": totals.get(prefix + "bytes", 0),
        })
    left = queued + delayed + inflight + seeds
    # the last download attempt (the audit log's newest entry id is its time in ms): how long the crawl has been still
    last_attempt = int(last_logged[0][0].split(b"-")[0]) / 1000 if last_logged else None
    still = round(now - last_attempt, 1) if last_attempt and not left else None
    state = ("not started" if not left and not totals.get("requests") else
             "done" if still is not None and still >= settings.getfloat("STATUS_DONE_AFTER") else "crawling")
    budget = int(budget) if budget else settings.getint("CRAWL_BUDGET")
    data = {
        "spider": spider, "time": now, "state": state, "idle_seconds": still,
        "paused": bool(paused), "partitions": layout.partitions,
        "epoch": asdict(current) if current else None,
        "seeds": seeds, "queued": queued, "inflight": inflight, "delayed": delayed, "seen": int(seen or 0),
        "dlq": dlq, "bad_seeds": bad_seeds, "bad_requests": bad_requests,
        "budget": budget, "budget_used": int(budget_used or 0),
        "pages_per_min_1m": round(rate1, 2), "pages_per_min_5m": round(rate5, 2),
        # the last minute's pace (the 5-minute one when the last minute saw nothing) over what is left
        "eta_seconds": (0.0 if not left else round(left / (rate1 or rate5) * 60, 1) if (rate1 or rate5) > 0 else None),
        "totals": {k: totals.get(k, 0) for k in ("requests", *CLASSES, "bytes", "items", "retries", "dlq")},
        "latency_ms": {"p50": percentile(_histogram(totals), 0.5), "p95": percentile(_histogram(totals), 0.95)},
        "audit_log_entries": logged,
        "domains": domain_rows, "queued_by_domain": per_domain, "lanes": lanes,
        "workers": workers, "workers_alive": sum(w["alive"] for w in workers),
        "workers_dead": sum(w["state"] == "dead" for w in workers),
        "counters": ints(counters),
        # what workers saw go wrong with the frontier itself (it vanished from Redis), newest first
        "incidents": [json.loads(raw) for raw in incidents],
        "problems": problems,
    }
    if with_items:
        data["items"] = item_counts(settings, spider, totals["items"], mongo, current.id if current else "")
        if data["items"].get("crawl") is not None:
            # the store's own figure: the workers' counter misses what a worker killed within a stats interval
            # of its write had not sent yet (the document is marked, so no other worker counts it again)
            data["totals"]["items"] = data["items"]["crawl"]
    health = proxy_health(server)
    data["proxies"], data["proxy_tiers"] = health["proxies"], health["tiers"]
    data["quality"] = quality_summary(server, spider)
    data["ladder"] = read_ladder(server)  # domains off the plain rung (crawlhub.ladder)
    data["ladder_rows"] = ladder_rows(data["ladder"], data["time"])  # (as crawlhub ui shows them)
    data["sessions"] = read_sessions(server, spider)  # the sessions shared by the cluster (crawlhub.sessions)
    return data


def quality_summary(server: redis.Redis, spider: str) -> dict[str, Any]:
    """What status, the UI and the report show of data quality (``crawlhub quality`` shows everything)."""
    report = quality_report(server, spider, closed=5, pages=False)
    fig = report["figures"]
    return {"healthy": report["healthy"], "score": report["score"], "score_min": report["score_min"],
            "cycle": report["cycle"], "baseline_cycle": report["baseline_cycle"], "events": report["events"],
            "broken_pages": report["broken_count"], "coverage": fig["coverage"], "patterns": fig["patterns"],
            "valid_share": fig["valid_share"], "quarantined_by_reason": fig["quarantined_by_reason"],
            "dlq_by_reason": fig["dlq_by_reason"], "alerts": report["alerts"][:5], "closed": report["closed"]}



def limit_rows(server: redis.Redis, settings: BaseSettings, domains: list[str] | None = None) -> list[dict[str, Any]]:
    """What `crawlhub limits show` prints: each domain's limit and where it comes from, its state, its robots.txt."""
    defaults = Politeness.from_settings(server, settings)
    layouts = partitioned_frontiers(server, settings)
    rows = []
    for domain in domains or known_domains(server, layouts=layouts):
        runtime = get_limit(server, domain)
        configured = (defaults.domains or {}).get(domain)
        limit = {"rate": defaults.rate, "concurrency": defaults.concurrency}
        limit.update(configured or {})
        limit.update(runtime or {})
        row = domain_state(server, domain, layouts=layouts)
        row.update(limit=limit, source="run time" if runtime else "settings" if configured else "default")
        if not limit.get("concurrency"):
            row["active"] = None  # no cap, no active set (tick.lua): its downloads are not counted
        row["robots"] = {o: r for o in (f"http://{domain}", f"https://{domain}") if (r := robots_state(server, o))}
        rows.append(row)
    return rows


def partition_rows(server: redis.Redis, keys: Keys) -> list[dict[str, Any]]:
    """What `crawlhub partitions SPIDER` prints: per partition its hash tag, Redis Cluster slot, node (on a
    cluster), domains, queued, in flight, waiting to retry, dead letters and URLs seen."""
    from redis.crc import key_slot

    rows = []
    for p, (part, counts) in enumerate(zip(keys.parts, per_partition(server, keys.parts), strict=True)):
        node = server.get_node_from_key(part.anchor).name if isinstance(server, RedisCluster) else ""
        rows.append({"partition": p, "tag": part.tag, "slot": key_slot(part.anchor.encode()) if part.tag else None,
                     "node": node, **counts})
    return rows
