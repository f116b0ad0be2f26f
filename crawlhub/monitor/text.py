"""The human view of a crawl's status (what `crawlhub status` prints)."""

from __future__ import annotations

import time
from typing import Any


def _ms(value: float | None) -> str:
    if value is None:
        return "-"
    return ">30s" if value == float("inf") else f"{value:.0f}ms"


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "unknown"
    seconds = int(seconds)
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m" if seconds >= 3600 else f"{seconds // 60}m{seconds % 60:02d}s"


def _done_line(data: dict[str, Any]) -> str:
    """A done crawl's line: what its live workers do now, and the advice only when some are left to stop."""
    line = f"done: the frontier has been empty, nothing in flight, for {_duration(data['idle_seconds'])}"
    alive = data.get("workers_alive", 0)
    if not alive:
        return f"{line}; no worker is running"
    workers = "1 worker is" if alive == 1 else f"{alive} workers are"
    return (f"{line}; {workers} still running, waiting for new seeds by design: stop "
            f"{'it' if alive == 1 else 'them'}, or set MAX_IDLE_TIME_BEFORE_CLOSE")


def format_status(data: dict[str, Any]) -> list[str]:
    """The human view of cluster_status (what `crawlhub status` prints)."""
    from crawlhub.ladder import format_ladder
    from crawlhub.proxies import format_health
    from crawlhub.roles import format_lanes
    from crawlhub.sessions import format_sessions

    if "totals" not in data:  # a spider whose state could not be read (cluster_status's caller says why)
        return [f"spider {data['spider']}:", *(f"!! {problem}" for problem in data.get("problems", []))]
    t = data["totals"]
    lines = [
        f"spider {data['spider']}{'  [PAUSED]' if data['paused'] else ''}: {data['seeds']} seeds waiting, "
        f"{data['queued']} queued, {data['inflight']} in flight, {data['delayed']} waiting to retry, "
        f"{data['seen']} URLs seen",
        *([_done_line(data)] if data.get("state") == "done" else []),
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
    lines += format_lanes(data.get("lanes") or [])
    lines.append(f"workers: {data['workers_alive']} alive, {data['workers_dead']} dead")
    now = data["time"]
    for w in data["workers"]:
        redis_rate = f"redis={w['redis_per_s']:g}/s " if "redis_per_s" in w else ""
        rungs = f"takes={','.join(w['capabilities'])} " if w.get("capabilities") else ""
        lines.append(f"  {w['worker']:28} {w['state']:9} pages={w['pages']:<6} items={w['items']:<6} {redis_rate}{rungs}"
                     f"beat {now - w['last_beat']:.0f}s ago{'  (' + w['reason'] + ')' if w.get('reason') else ''}")
    if data.get("ladder"):
        lines.append("ladder (domains off the plain rung):")
        lines += format_ladder(data["ladder"], now)
    lines += format_sessions(data.get("sessions") or {})
    if data["proxies"]:
        lines.append("proxies:")
        lines += format_health({"proxies": data["proxies"], "tiers": data["proxy_tiers"]})
    return lines


