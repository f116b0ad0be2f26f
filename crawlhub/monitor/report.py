"""The HTML report (`crawlhub report`): a self-contained page of the crawl's status, charts and tables."""

from __future__ import annotations

import html
import time
from datetime import timezone
from typing import Any

import redis
from scrapy.settings import BaseSettings

from crawlhub.frontier.keys import spider_keys as spider_keys_of
from crawlhub.ladder import ladder_rows
from crawlhub.monitor.auditlog import log_entry
from crawlhub.monitor.status import CLASSES, cluster_status, ints
from crawlhub.quality import percent, quality_report, when
from crawlhub.stats import log_key, minute_key

# -- the HTML report ----------------------------------------------------------------------------
BUCKETS = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 21600, 43200, 86400)
MOST_POINTS = 120  # points in a time chart at most


def bucket_for(span: float, most: int = MOST_POINTS) -> int:
    """The time bucket (seconds) that shows a crawl of ``span`` seconds in at most ``most`` points."""
    return next((b for b in BUCKETS if span / b <= most), BUCKETS[-1])


def bucketed(rows: list[tuple[float, dict[str, int]]], seconds: int) -> list[dict[str, Any]]:
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


def report_series(server: redis.Redis, spider: str) -> list[dict[str, Any]]:
    """Attempts over time, in buckets fitted to the crawl's length: from the audit log (every attempt,
    to the second) when it still holds the whole crawl, else from the per-minute counts."""
    pattern = spider_keys_of(spider).stats_minutes + ":*"
    minute_keys = sorted(int(k.decode().rsplit(":", 1)[1]) for k in server.scan_iter(pattern, count=1000))
    pipe = server.pipeline(transaction=False)
    for m in minute_keys:
        pipe.hgetall(minute_key(spider, m))
    minutes = [(m * 60.0, ints(raw)) for m, raw in zip(minute_keys, pipe.execute(), strict=True)]
    first: list[tuple[bytes, dict[bytes, bytes]]] = server.xrange(log_key(spider), count=1)  # type: ignore[assignment]
    in_log = server.xlen(log_key(spider))
    logged_from: float = log_entry(first[0][1])["time"] if first else 0.0
    if in_log and (not minutes or logged_from < minutes[0][0] + 60):  # the log has the whole crawl
        rows = []
        entries: list[tuple[bytes, dict[bytes, bytes]]] = server.xrange(log_key(spider))  # type: ignore[assignment]
        for _, fields in entries:
            e = log_entry(fields)
            cls = "error" if e["status"] is None else f"{e['status'] // 100}xx"
            rows.append((e["time"], {cls: 1, "requests": 1}))
        span = rows[-1][0] - rows[0][0] if rows else 0
        return bucketed(sorted(rows, key=lambda r: r[0]), bucket_for(span))
    span = (minutes[-1][0] - minutes[0][0] + 60) if minutes else 0
    return bucketed(minutes, max(60, bucket_for(span)))


def report_data(server: redis.Redis, settings: BaseSettings, spider: str) -> dict[str, Any]:
    return {"status": cluster_status(server, settings, spider), "series": report_series(server, spider),
            "revisit": revisit_report(settings, spider), "quality": quality_report(server, spider)}


FRESHNESS = ((3600, "< 1 h"), (6 * 3600, "1-6 h"), (86400, "6-24 h"), (7 * 86400, "1-7 days"), (float("inf"), "> 7 days"))


def revisit_report(settings: BaseSettings, spider: str, now: float | None = None) -> dict[str, Any] | None:
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


def _svg_axes(width: float, height: float, pad: float, ymax: float, label: str) -> str:
    return (f'<line x1="{pad}" y1="{height - pad}" x2="{width - 10}" y2="{height - pad}" stroke="#999"/>'
            f'<line x1="{pad}" y1="{TOP}" x2="{pad}" y2="{height - pad}" stroke="#999"/>'
            f'<text x="4" y="{TOP + 8}" font-size="11">{ymax:g}</text><text x="4" y="{height - pad}" font-size="11">0</text>'
            f'<text x="{pad + 4}" y="{height - 6}" font-size="11">{html.escape(label)}</text>')


def _svg(chart_id: str, title: str, width: int, height: int, body: str) -> str:
    return (f'<h2>{html.escape(title)}</h2><svg class="chart" id="{chart_id}" viewBox="0 0 {width} {height}" '
            f'preserveAspectRatio="xMinYMin meet">{body}</svg>')


def line_chart(chart_id: str, title: str, points: list[tuple[str, float]], width: int = WIDTH, height: int = 240) -> str:
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
              width: int = WIDTH, height: int = 260, stacked: bool = True) -> str:
    pad = 40
    names = list(colors)
    totals = [sum(v.values()) if stacked else max(list(v.values()) + [0]) for _, v in groups]
    ymax = max(totals + [1])
    slot = min((width - pad - 10) / max(len(groups), 1), 90)
    bars = []
    for i, (label, values) in enumerate(groups):
        base = float(height - pad)
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
               unit: str = "", width: int = WIDTH) -> str:
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


def table(headers: list[str], rows: list[list[Any]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row) + "</tr>" for row in rows)
    return f'<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def _span_label(seconds: int) -> str:
    return f"{seconds} s" if seconds < 60 else f"{seconds // 60} min" if seconds < 3600 else f"{seconds // 3600} h"


STATUS_COLORS = {"2xx": "#16a34a", "3xx": "#2563eb", "4xx": "#f59e0b", "5xx": "#dc2626", "error": "#6b7280"}


def chart_parts(status: dict[str, Any], series: list[dict[str, Any]]) -> dict[str, Any]:
    """The charts of a crawl as inline SVG, and the numbers behind them (the HTML report, `crawlhub ui`)."""
    # series rows: {"at": epoch, "seconds": bucket, counts...} (or {"minute": m, counts...})
    series = [{"at": s["minute"] * 60, "seconds": 60, **s} if "minute" in s else s for s in series]
    seconds = series[0]["seconds"] if series else 60
    fmt = "%H:%M:%S" if seconds < 60 else "%H:%M" if seconds < 86400 else "%Y-%m-%d"

    def label(s: dict[str, Any]) -> str:
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


def html_report(data: dict[str, Any]) -> str:
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
{_ladder_section(status.get("ladder"), status["time"])}
{_revisit_section(data.get("revisit"))}
{_quality_section(data.get("quality"))}
</body></html>
"""


def _ladder_section(ladder: dict[str, dict[str, Any]] | None, now: float) -> str:
    """The domains off the plain rung (docs/anti-blocking.md, the ladder); nothing when every domain is plain."""
    rows = ladder_rows(ladder or {}, now)
    if not rows:
        return ""
    return "<h2>The ladder: domains off the plain rung</h2>\n" + table(["domain", "rung", "since", "why", "probe"], rows)


def _revisit_section(revisit: dict[str, Any] | None) -> str:
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


def _quality_section(quality: dict[str, Any] | None) -> str:
    """Data quality: the score, the open events, coverage per field and items per page by pattern."""
    if not quality:
        return ""
    fig = quality["figures"]
    def pct(value: float | None) -> str:
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


def _ms_bound(value: float | None) -> str:
    """A latency percentile (the upper bound of its histogram bucket), as text."""
    if value is None:
        return "-"
    return "> 30 s" if value == float("inf") else f"<= {value:g} ms"

