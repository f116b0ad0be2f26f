"""What the `crawlhub` command reads and shows: cluster status, the audit log, the HTML report.

All of it comes from Redis (frontier keys, crawlhub.stats counters and
stream, worker heartbeats) and MongoDB (items per collection). docs/cli.md
documents the JSON of ``crawlhub status --json`` field by field.
"""

from __future__ import annotations

import html
import json
import time
from dataclasses import asdict
from datetime import timezone

from crawlhub.frontier.epoch import Epoch
from crawlhub.frontier.keys import Keys
from crawlhub.frontier.keys import spider_keys as spider_keys_of
from crawlhub.frontier.operations import partition_counts, queued_per_domain
from crawlhub.frontier.partitions import frontier_keys
from crawlhub.items import cycle_field
from crawlhub.proxies import proxy_health
from crawlhub.quality import percent, quality_report, when
from crawlhub.seeds import WrongSeedKey, count_seeds
from crawlhub.stats import LATENCY_BUCKETS_MS, items_field, log_key, minute_key, percentile

CLASSES = ("2xx", "3xx", "4xx", "5xx", "error")


def spider_keys(settings, spider: str) -> dict[str, str]:
    """Every Redis key crawlhub keeps for a spider (docs/redis-keys.md)."""
    return Keys.for_spider(settings, spider).names()


def _ints(raw: dict) -> dict[str, int]:
    return {k.decode(): int(v) for k, v in raw.items()}


def _histogram(counts: dict[str, int], prefix: str = "") -> dict[str, int]:
    return {b: counts.get(f"{prefix}lat:{b}", 0) for b in [*map(str, LATENCY_BUCKETS_MS), "inf"]}


def recent_minutes(server, spider: str, now: float, minutes: int = 6) -> dict[int, dict[str, int]]:
    current = int(now // 60)
    pipe = server.pipeline(transaction=False)
    wanted = list(range(current - minutes + 1, current + 1))
    for m in wanted:
        pipe.hgetall(minute_key(spider, m))
    return {m: _ints(raw) for m, raw in zip(wanted, pipe.execute(), strict=True)}


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


def worker_rows(raw: dict, now: float, dead_after: float) -> list[dict]:
    rows = []
    for value in raw.values():
        w = json.loads(value)
        w["alive"] = w.get("state") == "running" and now - w.get("last_beat", 0) <= dead_after
        if w.get("state") == "running" and not w["alive"]:
            w["state"] = "dead"
        rows.append(w)
    return sorted(rows, key=lambda w: w.get("started_at", 0))


def item_counts(settings, spider: str, items_stored: int, mongo=None, epoch: str = "") -> dict:
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


def has_frontier(server, settings, spider: str) -> bool:
    """Whether ``spider`` has crawl state in this Redis (workers, seeds, a layout or a queue)."""
    k = frontier_keys(server, settings, spider)
    return bool(server.exists(k.workers, k.seeds, k.layout, *(part.queued for part in k.parts)))


def cluster_status(server, settings, spider: str, with_items: bool = True, mongo=None) -> dict:
    """Everything `crawlhub status SPIDER` shows, as JSON-able data (docs/cli.md)."""
    now = time.time()
    layout = frontier_keys(server, settings, spider)
    keys = layout.names()
    counts = partition_counts(server, layout.parts)
    per_domain = queued_per_domain(server, layout)
    inflight, delayed, dlq, seen = counts["inflight"], counts["delayed"], counts["dlq"], counts["seen"]
    pipe = server.pipeline(transaction=False)
    pipe.llen(keys["bad_seeds"]).llen(keys["bad_requests"])
    pipe.get(keys["budget"]).get(keys["budget_used"]).hgetall(keys["stats"]).hgetall(keys["workers"])
    pipe.hgetall(keys["stats_totals"]).exists(keys["paused"]).xlen(keys["log"]).lrange(keys["incidents"], 0, 9)
    pipe.get(keys["epoch"]).xrevrange(keys["log"], count=1)
    (bad_seeds, bad_requests, budget, budget_used, counters, workers, totals, paused, logged,
     incidents, current, last_logged) = pipe.execute()
    problems = []
    try:
        seeds = count_seeds(server, keys["seeds"])
    except WrongSeedKey as exc:  # this spider's alone: shown with it, never an error for the whole overview
        seeds, problems = 0, [str(exc)]
    totals = _ints(totals)
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
    domains = sorted({k.split("|")[1] for k in totals if k.startswith("d|")} | set(per_domain))
    domain_rows = []
    for d in domains:
        prefix = f"d|{d}|"
        requests = totals.get(prefix + "requests", 0)
        ok = totals.get(prefix + "2xx", 0) + totals.get(prefix + "3xx", 0)
        hist = _histogram(totals, prefix)
        domain_rows.append({
            "domain": d, "requests": requests, "queued": per_domain.get(d, 0),
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
        "domains": domain_rows, "queued_by_domain": per_domain,
        "workers": workers, "workers_alive": sum(w["alive"] for w in workers),
        "workers_dead": sum(w["state"] == "dead" for w in workers),
        "counters": _ints(counters),
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
    return data


def quality_summary(server, spider: str) -> dict:
    """What status, the UI and the report show of data quality (``crawlhub quality`` shows everything)."""
    report = quality_report(server, spider, closed=5, pages=False)
    fig = report["figures"]
    return {"healthy": report["healthy"], "score": report["score"], "score_min": report["score_min"],
            "cycle": report["cycle"], "baseline_cycle": report["baseline_cycle"], "events": report["events"],
            "broken_pages": report["broken_count"], "coverage": fig["coverage"], "patterns": fig["patterns"],
            "valid_share": fig["valid_share"], "quarantined_by_reason": fig["quarantined_by_reason"],
            "dlq_by_reason": fig["dlq_by_reason"], "alerts": report["alerts"][:5], "closed": report["closed"]}


def _ms(value) -> str:
    if value is None:
        return "-"
    return ">30s" if value == float("inf") else f"{value:.0f}ms"


def _duration(seconds) -> str:
    if seconds is None:
        return "unknown"
    seconds = int(seconds)
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m" if seconds >= 3600 else f"{seconds // 60}m{seconds % 60:02d}s"


def format_status(data: dict) -> list[str]:
    """The human view of cluster_status (what `crawlhub status` prints)."""
    from crawlhub.proxies import format_health

    if "totals" not in data:  # a spider whose state could not be read (cluster_status's caller says why)
        return [f"spider {data['spider']}:", *(f"!! {problem}" for problem in data.get("problems", []))]
    t = data["totals"]
    lines = [
        f"spider {data['spider']}{'  [PAUSED]' if data['paused'] else ''}: {data['seeds']} seeds waiting, "
        f"{data['queued']} queued, {data['inflight']} in flight, {data['delayed']} waiting to retry, "
        f"{data['seen']} URLs seen",
        *([f"done: the frontier has been empty, nothing in flight, for {_duration(data['idle_seconds'])} (workers wait "
           f"for new seeds by design: stop them, or set MAX_IDLE_TIME_BEFORE_CLOSE)"] if data.get("state") == "done" else []),
        f"pages/min: {data['pages_per_min_1m']:.1f} (1 min), {data['pages_per_min_5m']:.1f} (5 min)   "
        f"ETA: {_duration(data['eta_seconds'])}",
        f"attempts: {t['requests']}  2xx={t['2xx']} 3xx={t['3xx']} 4xx={t['4xx']} 5xx={t['5xx']} errors={t['error']}  "
        f"retries={t['retries']}  latency p50 {_ms(data['latency_ms']['p50'])} p95 {_ms(data['latency_ms']['p95'])}",
        f"dead letters: {data['dlq']}   bad seeds: {data['bad_seeds']}   bad request payloads: {data['bad_requests']}",
    ]
    lines += [f"!! {problem}" for problem in data.get("problems", [])]
    for incident in data.get("incidents", [])[:3]:
        lines.append(f"!! {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(incident['at']))}: {incident['what']} "
                     f"(seen by {incident['worker']}, holding {incident.get('held_pages', 0)} pages): queued pages "
                     "are lost; seed again (docs/frontier.md)")
    items = data.get("items")
    if items is not None:
        if "error" in items:
            lines.append(f"items: {items['error']}")
        else:
            share = f"{items['valid_share'] * 100:.1f}% valid" if items["valid_share"] is not None else "no items yet"
            stored = ", ".join(f"{k}={v}" for k, v in items["stored"].items()) or "none"
            lines.append(f"items: {t['items']} stored in this crawl (since the last reset); in database {items['database']!r}, "
                         f"stored by this spider: {stored}; quarantined {items['quarantined']} ({share})")
            if items.get("revisit"):
                r = items["revisit"]
                lines.append(f"revisits: {r['pages']} pages in the status store, {r['due_now']} due now, "
                             f"{r['fresh']} fresh (`crawlhub schedule {data['spider']}`)")
    quality = data.get("quality")
    if quality is not None and (quality["cycle"]["id"] or quality["events"]):
        lines.append(f"quality: score {quality['score']:g}/100, {len(quality['events'])} open event(s), "
                     f"{quality['broken_pages']} broken page(s) (`crawlhub quality {data['spider']}`)")
        for event in quality["events"][:5]:
            lines.append(f"  !! {event['what']}: {event['why']}")
    if data["budget"]:
        lines.append(f"budget: {data['budget_used']} of {data['budget']} requests taken")
    if data["domains"]:
        lines.append(f"{'domain':32} {'attempts':>8} {'queued':>7} {'success':>8} {'p50':>7} {'p95':>7}")
        for d in sorted(data["domains"], key=lambda r: -r["requests"])[:15]:
            rate = f"{d['success_rate'] * 100:.1f}%" if d["success_rate"] is not None else "-"
            lines.append(f"{d['domain'][:32]:32} {d['requests']:>8} {d['queued']:>7} {rate:>8} "
                         f"{_ms(d['p50_ms']):>7} {_ms(d['p95_ms']):>7}")
    lines.append(f"workers: {data['workers_alive']} alive, {data['workers_dead']} dead")
    now = data["time"]
    for w in data["workers"]:
        lines.append(f"  {w['worker']:28} {w['state']:9} pages={w['pages']:<6} items={w['items']:<6} "
                     f"beat {now - w['last_beat']:.0f}s ago{'  (' + w['reason'] + ')' if w.get('reason') else ''}")
    if data["proxies"]:
        lines.append("proxies:")
        lines += format_health({"proxies": data["proxies"], "tiers": data["proxy_tiers"]})
    return lines


# -- the audit log ------------------------------------------------------------------------------
def log_entry(fields: dict) -> dict:
    e = {k.decode(): v.decode() for k, v in fields.items()}
    return {"time": float(e["t"]), "url": e["url"], "domain": e.get("domain", ""), "worker": e.get("worker", ""),
            "status": int(e["status"]) if e.get("status") else None, "error": e.get("error", ""),
            "ms": float(e.get("ms") or 0), "bytes": int(e.get("bytes") or 0), "proxy": e.get("proxy", ""),
            "browser": e.get("browser") == "1"}


def matches(entry: dict, status: str | None, domain: str | None) -> bool:
    if domain and entry["domain"] != domain:
        return False
    if status:
        s = status.lower()
        if s == "error":
            return entry["status"] is None
        if s.endswith("xx"):
            return entry["status"] is not None and str(entry["status"])[0] == s[0]
        return str(entry["status"]) == s
    return True


def format_entry(e: dict) -> str:
    when = time.strftime("%H:%M:%S", time.localtime(e["time"])) + f".{int(e['time'] * 1000) % 1000:03d}"
    outcome = str(e["status"]) if e["status"] is not None else f"ERR {e['error']}"
    extra = (f" via {e['proxy']}" if e["proxy"] else "") + (" [browser]" if e["browser"] else "")
    return f"{when} {outcome:>5} {e['ms']:7.0f}ms {e['bytes']:>8}B  {e['worker']:24} {e['url']}{extra}"


def read_log(server, spider: str, limit: int, status=None, domain=None) -> tuple[list[dict], bytes]:
    """The newest ``limit`` matching entries, oldest first, and the last stream id seen."""
    found, last_id, start = [], b"0-0", "+"
    while len(found) < limit:
        batch = server.xrevrange(log_key(spider), max=start, min="-", count=1000)
        if not batch:
            break
        if last_id == b"0-0":
            last_id = batch[0][0]
        for _, fields in batch:
            e = log_entry(fields)
            if matches(e, status, domain):
                found.append(e)
                if len(found) >= limit:
                    break
        start = "(" + batch[-1][0].decode()
    # workers send their entries in batches: in the stream, one worker's may follow another's later ones
    found.reverse()  # into stream order: the sort is stable, so entries of one time keep it
    return sorted(found, key=lambda e: e["time"]), last_id


# -- the HTML report ----------------------------------------------------------------------------
BUCKETS = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 21600, 43200, 86400)
MOST_POINTS = 120  # points in a time chart at most


def bucket_for(span: float, most: int = MOST_POINTS) -> int:
    """The time bucket (seconds) that shows a crawl of ``span`` seconds in at most ``most`` points."""
    return next((b for b in BUCKETS if span / b <= most), BUCKETS[-1])


def bucketed(rows: list[tuple[float, dict[str, int]]], seconds: int) -> list[dict]:
    """(time, counts) rows summed into buckets of ``seconds``; empty buckets between are kept (as 0)."""
    if not rows:
        return []
    out: dict[int, dict[str, int]] = {}
    first = int(min(t for t, _ in rows) // seconds)
    last = int(max(t for t, _ in rows) // seconds)
    for b in range(first, last + 1):
        out[b] = {}
    for t, counts in rows:
        into = out[int(t // seconds)]
        for name, n in counts.items():
            into[name] = into.get(name, 0) + n
    return [{"at": b * seconds, "seconds": seconds, **counts} for b, counts in sorted(out.items())]


def report_series(server, spider: str) -> list[dict]:
    """Attempts over time, in buckets fitted to the crawl's length: from the audit log (every attempt,
    to the second) when it still holds the whole crawl, else from the per-minute counts."""
    pattern = spider_keys_of(spider).stats_minutes + ":*"
    minute_keys = sorted(int(k.decode().rsplit(":", 1)[1]) for k in server.scan_iter(pattern, count=1000))
    pipe = server.pipeline(transaction=False)
    for m in minute_keys:
        pipe.hgetall(minute_key(spider, m))
    minutes = [(m * 60.0, _ints(raw)) for m, raw in zip(minute_keys, pipe.execute(), strict=True)]
    first = server.xrange(log_key(spider), count=1)
    in_log = server.xlen(log_key(spider))
    logged_from = log_entry(first[0][1])["time"] if first else None
    if in_log and (not minutes or logged_from < minutes[0][0] + 60):  # the log has the whole crawl
        rows = []
        for _, fields in server.xrange(log_key(spider)):
            e = log_entry(fields)
            cls = "error" if e["status"] is None else f"{e['status'] // 100}xx"
            rows.append((e["time"], {cls: 1, "requests": 1}))
        span = rows[-1][0] - rows[0][0] if rows else 0
        return bucketed(sorted(rows, key=lambda r: r[0]), bucket_for(span))
    span = (minutes[-1][0] - minutes[0][0] + 60) if minutes else 0
    return bucketed(minutes, max(60, bucket_for(span)))


def report_data(server, settings, spider: str) -> dict:
    return {"status": cluster_status(server, settings, spider), "series": report_series(server, spider),
            "revisit": revisit_report(settings, spider), "quality": quality_report(server, spider)}


FRESHNESS = ((3600, "< 1 h"), (6 * 3600, "1-6 h"), (86400, "6-24 h"), (7 * 86400, "1-7 days"), (float("inf"), "> 7 days"))


def revisit_report(settings, spider: str, now: float | None = None) -> dict | None:
    """Continuous crawling, for the report: pages per age of their last fetch, and changes over time (None: one-shot)."""
    from crawlhub.connection import get_mongo

    now = time.time() if now is None else now
    settings = settings.copy()
    settings.set("MONGO_SERVER_SELECTION_TIMEOUT_MS", 3000)
    try:
        client = get_mongo(settings)
        db = client[settings.get("MONGO_DATABASE")]
        fetched = [d.get("last_fetch", now) for d in db[settings.get("STATUS_COLLECTION", "url_status")].find(
            {"spider": spider}, {"last_fetch": 1})]
        changes_name = settings.get("CHANGES_COLLECTION")
        changed = [d["at"].replace(tzinfo=timezone.utc).timestamp() for d in db[changes_name].find(
            {"spider": spider}, {"at": 1})] if changes_name else []
        client.close()
    except Exception:  # noqa: BLE001 - the report shows what it can
        return None
    if not fetched:
        return None
    freshness = dict.fromkeys((label for _, label in FRESHNESS), 0)
    for last in fetched:
        freshness[next(label for bound, label in FRESHNESS if now - last < bound)] += 1
    span = (max(changed) - min(changed)) if changed else 0
    bucket = 3600 if span < 2 * 86400 else 86400
    per_bucket: dict[int, int] = {}
    for at in changed:
        per_bucket[int(at // bucket)] = per_bucket.get(int(at // bucket), 0) + 1
    return {"freshness": freshness, "changes": [{"at": b * bucket, "seconds": bucket, "changes": n}
                                                for b, n in sorted(per_bucket.items())]}


TOP = 26  # room above the plot for the legend
WIDTH = 1000  # the charts' coordinate width; they are drawn at the page's full width


def _svg_axes(width, height, pad, ymax, label):
    return (f'<line x1="{pad}" y1="{height - pad}" x2="{width - 10}" y2="{height - pad}" stroke="#999"/>'
            f'<line x1="{pad}" y1="{TOP}" x2="{pad}" y2="{height - pad}" stroke="#999"/>'
            f'<text x="4" y="{TOP + 8}" font-size="11">{ymax:g}</text><text x="4" y="{height - pad}" font-size="11">0</text>'
            f'<text x="{pad + 4}" y="{height - 6}" font-size="11">{html.escape(label)}</text>')


def _svg(chart_id: str, title: str, width: int, height: int, body: str) -> str:
    return (f'<h2>{html.escape(title)}</h2><svg class="chart" id="{chart_id}" viewBox="0 0 {width} {height}" '
            f'preserveAspectRatio="xMinYMin meet">{body}</svg>')


def line_chart(chart_id: str, title: str, points: list[tuple[str, float]], width=WIDTH, height=240) -> str:
    pad = 40
    ymax = max([v for _, v in points] + [1])
    n = max(len(points) - 1, 1)
    xy = [(pad + i * (width - pad - 10) / n, height - pad - v / ymax * (height - pad - TOP)) for i, (_, v) in enumerate(points)]
    path = " ".join(f"{x:.1f},{y:.1f}" for x, y in xy) or f"{pad},{height - pad}"
    dots = "".join(f'<circle class="point" cx="{x:.1f}" cy="{y:.1f}" r="3" fill="#2563eb">'
                   f'<title>{html.escape(lab)}: {v:g}</title></circle>'
                   for (x, y), (lab, v) in zip(xy, points, strict=True))
    label = f"{points[0][0]} .. {points[-1][0]}" if points else "no data"
    return _svg(chart_id, title, width, height, f'{_svg_axes(width, height, pad, ymax, label)}'
                f'<polyline fill="none" stroke="#2563eb" stroke-width="2" points="{path}"/>{dots}')


def bar_chart(chart_id: str, title: str, groups: list[tuple[str, dict[str, float]]], colors: dict[str, str],
              width=WIDTH, height=260, stacked=True) -> str:
    pad = 40
    names = list(colors)
    totals = [sum(v.values()) if stacked else max(list(v.values()) + [0]) for _, v in groups]
    ymax = max(totals + [1])
    slot = min((width - pad - 10) / max(len(groups), 1), 90)
    bars = []
    for i, (label, values) in enumerate(groups):
        base = height - pad
        for j, name in enumerate(names):
            v = values.get(name, 0)
            h = v / ymax * (height - pad - TOP)
            if stacked:
                x, w, y = pad + i * slot + 2, max(slot - 4, 1), base - h
                base -= h
            else:
                w = max((slot - 4) / len(names), 1)
                x, y = pad + i * slot + 2 + j * w, height - pad - h
            bars.append(f'<rect class="bar" x="{x:.1f}" y="{y:.1f}" width="{w:.1f}" height="{max(h, 0):.1f}" '
                        f'fill="{colors[name]}"><title>{html.escape(label)} {name}: {v:g}</title></rect>')
    legend = "".join(f'<tspan fill="{c}">&#9632; {html.escape(n)}  </tspan>' for n, c in colors.items())
    every = max(1, len(groups) // 12)  # a time label every few bars
    labels = "".join(f'<text x="{pad + i * slot + 2:.1f}" y="{height - pad + 14}" font-size="10">{html.escape(label)}</text>'
                     for i, (label, _) in enumerate(groups) if i % every == 0)
    return _svg(chart_id, title, width, height, f'{_svg_axes(width, height, pad, ymax, "")}'
                f'<text x="{pad}" y="14" font-size="11">{legend}</text>{"".join(bars)}{labels}')


def hbar_chart(chart_id: str, title: str, rows: list[tuple[str, dict[str, float]]], colors: dict[str, str],
               unit: str = "", width=WIDTH) -> str:
    """Horizontal bars, one group per row, its label (a domain name) written out in full on the left."""
    label_w = min(420, max([len(label) for label, _ in rows] + [10]) * 7 + 10)
    row_h, names = 22, list(colors)
    height = TOP + row_h * len(rows) * len(names) + 10 * len(rows) + 10
    vmax = max([v for _, vals in rows for v in vals.values()] + [1])
    out, y = [], TOP
    for label, values in rows:
        out.append(f'<text x="4" y="{y + row_h - 6}" font-size="12">{html.escape(label)}</text>')
        for name in names:
            v = values.get(name, 0)
            w = v / vmax * (width - label_w - 90)
            out.append(f'<rect class="bar" x="{label_w}" y="{y + 2}" width="{max(w, 1):.1f}" height="{row_h - 4}" '
                       f'fill="{colors[name]}"><title>{html.escape(label)} {name}: {v:g}{unit}</title></rect>'
                       f'<text x="{label_w + max(w, 1) + 4:.1f}" y="{y + row_h - 7}" font-size="11">{name} {v:g}{unit}</text>')
            y += row_h
        y += 10
    legend = "".join(f'<tspan fill="{c}">&#9632; {html.escape(n)}  </tspan>' for n, c in colors.items())
    return _svg(chart_id, title, width, height, f'<text x="4" y="14" font-size="11">{legend}</text>{"".join(out)}')


def table(headers: list[str], rows: list[list]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row) + "</tr>" for row in rows)
    return f'<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def _span_label(seconds: int) -> str:
    return f"{seconds} s" if seconds < 60 else f"{seconds // 60} min" if seconds < 3600 else f"{seconds // 3600} h"


STATUS_COLORS = {"2xx": "#16a34a", "3xx": "#2563eb", "4xx": "#f59e0b", "5xx": "#dc2626", "error": "#6b7280"}


def chart_parts(status: dict, series: list[dict]) -> dict:
    """The charts of a crawl as inline SVG, and the numbers behind them (the HTML report, `crawlhub ui`)."""
    # series rows: {"at": epoch, "seconds": bucket, counts...} (or {"minute": m, counts...})
    series = [{"at": s["minute"] * 60, "seconds": 60, **s} if "minute" in s else s for s in series]
    seconds = series[0]["seconds"] if series else 60
    fmt = "%H:%M:%S" if seconds < 60 else "%H:%M" if seconds < 86400 else "%Y-%m-%d"

    def label(s):
        return time.strftime(fmt, time.localtime(s["at"]))

    per = _span_label(seconds)
    pages = [(label(s), float(sum(s.get(c, 0) for c in CLASSES[:4]))) for s in series]
    codes = [(label(s), {c: s.get(c, 0) for c in CLASSES}) for s in series]
    domains = sorted(status["domains"], key=lambda r: -r["requests"])[:20]
    latency = [(d["domain"], {"p50": min(d["p50_ms"] or 0, 30000), "p95": min(d["p95_ms"] or 0, 30000)}) for d in domains]
    items = status.get("items", {})
    collections = [(name, {"stored": n}) for name, n in (items.get("stored") or {}).items()]
    collections.append(("quarantine", {"quarantined": items.get("quarantined", 0)}))
    db = items.get("database")
    return {
        "per": per, "series": series, "label": label, "domains": domains, "collections": collections,
        "pages": line_chart("pages-per-minute", f"Pages fetched per {per}", pages),
        "codes": bar_chart("status-codes", f"Status codes per {per}", codes, STATUS_COLORS),
        "latency": hbar_chart("latency-per-domain", "Latency per domain (ms, p50 and p95; each at most the value shown)",
                              latency, {"p50": "#2563eb", "p95": "#93c5fd"}, unit=" ms"),
        "items": bar_chart("items-per-collection", f"Items per collection (this spider's{', database ' + db if db else ''})",
                           collections, {"stored": "#16a34a", "quarantined": "#dc2626"}),
    }


def html_report(data: dict) -> str:
    """A self-contained page (inline SVG, no script, no external file): charts and the numbers behind them."""
    status = data["status"]
    charts = chart_parts(status, data["series"])
    series, label, per, domains, collections = (charts[k] for k in ("series", "label", "per", "domains", "collections"))
    t = status["totals"]
    summary = (f"{t['requests']} attempts, {t['2xx']} 2xx, {t['3xx']} 3xx, {t['4xx']} 4xx, {t['5xx']} 5xx, "
               f"{t['error']} errors; {t['items']} items; {status['dlq']} dead letters; {status['queued']} queued; "
               f"{status['workers_alive']} workers alive")
    generated = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(status["time"]))
    time_rows = [[label(s), *(s.get(c, 0) for c in CLASSES), sum(s.get(c, 0) for c in CLASSES[:4])] for s in series]
    domain_rows = [[d["domain"], d["requests"], *(d.get(c, 0) for c in CLASSES), _ms_bound(d["p50_ms"]),
                    _ms_bound(d["p95_ms"])] for d in domains]
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>crawlhub report: {html.escape(status['spider'])}</title>
<style>body{{font-family:sans-serif;margin:2em;color:#222}} svg.chart{{display:block;width:100%;height:auto;
margin-bottom:.8em;background:#fafafa}} h2{{font-size:1.05em;margin:1.4em 0 .3em}} .summary{{color:#555}}
table{{border-collapse:collapse;font-size:.85em;margin-bottom:1em}} td,th{{border:1px solid #ddd;padding:2px 8px;
text-align:right}} td:first-child,th:first-child{{text-align:left}}</style></head><body>
<h1>crawlhub report: {html.escape(status['spider'])}</h1>
<p class="summary">Generated {generated}. {html.escape(summary)}.</p>
{charts["pages"]}
{charts["codes"]}
<details><summary>The numbers, per {per}</summary>
{table(["from", *CLASSES, "pages"], time_rows)}</details>
{charts["latency"]}
{table(["domain", "requests", *CLASSES, "p50", "p95"], domain_rows)}
{charts["items"]}
{table(["collection", "documents"], [[name, next(iter(v.values()))] for name, v in collections])}
{_revisit_section(data.get("revisit"))}
{_quality_section(data.get("quality"))}
</body></html>
"""


def _revisit_section(revisit: dict | None) -> str:
    """Freshness and changes over time (continuous crawling only)."""
    if not revisit:
        return ""
    fresh = [(label, {"pages": n}) for label, n in revisit["freshness"].items()]
    changes = revisit["changes"]
    fmt = "%Y-%m-%d %H:00" if changes and changes[0]["seconds"] < 86400 else "%Y-%m-%d"
    points = [(time.strftime(fmt, time.localtime(c["at"])), float(c["changes"])) for c in changes]
    per = _span_label(changes[0]["seconds"]) if changes else "hour"
    return (bar_chart("freshness", "Freshness: pages per age of their last fetch", fresh, {"pages": "#2563eb"})
            + table(["age of the last fetch", "pages"], [[label, v["pages"]] for label, v in fresh])
            + line_chart("changes-over-time", f"Changed item fields per {per}", points))


def _quality_section(quality: dict | None) -> str:
    """Data quality: the score, the open events, coverage per field and items per page by pattern."""
    if not quality:
        return ""
    fig = quality["figures"]
    def pct(value):
        return percent(value, 1)

    head = (f"<h2 id=\"quality\">Data quality</h2><p class=\"summary\">Cycle {html.escape(str(quality['cycle']['id']))}"
            f" since {when(quality['cycle']['started'])}: score {fig['score']:g} of 100"
            f"{' (floor ' + format(quality['score_min'], 'g') + ')' if quality['score_min'] else ''}; "
            f"{len(quality['events'])} open event(s), {len(quality['broken'])} broken page(s).</p>")
    events = table(["open since", "event", "why", "example"],
                   [[when(e["since"]), e["what"], e["why"], e.get("example") or ""] for e in quality["events"]]) \
        if quality["events"] else ""
    coverage = table(["field", "coverage", "baseline", "floor"],
                     [[name, pct(c["share"]), pct(c["baseline"]), pct(c["floor"])] for name, c in fig["coverage"].items()])
    patterns = table(["pages like", "pages", "items/page", "baseline"],
                     [[p, v["pages"], f"{v['per_page']:g}", "-" if v["baseline_per_page"] is None
                       else f"{v['baseline_per_page']:g}"] for p, v in fig["patterns"].items()])
    alerts = table(["when", "change alert", "url"], [[when(a["since"]), a["why"], a.get("url") or ""]
                                                     for a in quality["alerts"]]) if quality["alerts"] else ""
    return head + events + coverage + patterns + alerts


def _ms_bound(value) -> str:
    """A latency percentile (the upper bound of its histogram bucket), as text."""
    if value is None:
        return "-"
    return "> 30 s" if value == float("inf") else f"<= {value:g} ms"
