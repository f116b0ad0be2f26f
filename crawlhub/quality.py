"""Quality figures: the keys, the counters, the score and the findings, shared by the workers and the tools.

Every worker counts what it extracts (crawlhub.extensions.quality.QualityMonitor) and the cluster stats send
the counts with their own pipeline (no round trip of their own). The same counts go to two hashes:

* ``<spider>:quality:c:<cycle>``: the crawl **cycle** (a one-shot spider's cycle is its frontier epoch,
  ``e<epoch id>``, so a ``crawlhub reset`` starts the next one; a revisiting spider's is a window of
  ``QUALITY_CYCLE`` seconds, default a day, ``t<start>``), kept ``QUALITY_RETENTION`` seconds; the cycles
  are listed in ``<spider>:quality:cycles`` (a sorted set by start time): the previous one is the baseline;
* ``<spider>:quality:w:<slot>``: a slot of ``QUALITY_WINDOW`` seconds; the last two slots are the **recent
  figures** that events open and close on (a fix shows within a window, not a day).

Fields of both (counters):

=====================  ==========================================================================
``pages``              leased pages whose work was done (their output consumed)
``broken``             of which judged broken (``degraded``: with items quarantined)
``p|<pattern>|pages``  pages of a URL pattern; ``p|<pattern>|items``: the items they yielded
``items``              items that reached validation; ``valid`` and ``invalid`` (quarantined) of them
``t|<Type>``           items of a type; ``f|<Type>|<field>``: of which with the field non-empty
``q|<field> <kind>``   quarantined items by reason (``price missing``, ``price invalid``, ``item invalid``)
``dlq``                requests sent to the dead-letter list; ``d|<reason>`` by reason (``HTTP 503``...)
=====================  ==========================================================================

The **quality score** (0..100) of a cycle: ``100 x valid x healthy x delivered x coverage`` where ``valid`` is
the share of items that kept their contract, ``healthy`` the share of pages not judged broken, ``delivered``
the share of requests not dead-lettered (``pages / (pages + dlq)``), and ``coverage`` the mean, over the
fields counted, of ``min(1, coverage / reference)``; a field's reference is its coverage in the baseline
cycle (when that cycle had ``QUALITY_MIN_ITEMS`` items of the type), else its declared floor; a field with
neither is not in the mean. A share with nothing counted is 1.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import redis

from crawlhub.items import is_empty

_NUMBER = re.compile(r"\d+")
CLOSED_MAX = 1000  # closed events kept per spider
ALERTS_MAX = 1000  # change alerts kept per spider


def quality_keys(spider: str) -> dict[str, str]:
    """The spider's quality keys in Redis (kept across ``crawlhub reset``: they describe the site and the store)."""
    keys = {name: f"{spider}:quality:{name}" for name in
            ("broken", "events", "closed", "cycles", "alerts", "meta")}
    keys["cycle"] = f"{spider}:quality:c:"
    keys["window"] = f"{spider}:quality:w:"
    return keys


def url_pattern(url: str, rules: tuple[re.Pattern[str], ...] = ()) -> str:
    """The kind of page ``url`` is: the first of ``rules`` it matches, else its host and path, numbers as ``*``."""
    for rule in rules:
        if rule.search(url):
            return rule.pattern
    parts = urlsplit(url)
    host = parts.hostname or "?"
    if parts.port:
        host += f":{parts.port}"
    return host + (_NUMBER.sub("*", parts.path) or "/")


def spider_rules(spider: Any) -> tuple[re.Pattern[str], ...]:
    declared = getattr(spider, "quality_rules", None) or list(dict(getattr(spider, "revisit_rules", None) or {}))
    return tuple(re.compile(rule) for rule in declared)


def dlq_reason(error: str, status: int | None) -> str:
    """A dead letter's reason, as a small set of kinds: ``HTTP 503``, ``callback error: KeyError``, ``TimeoutError``."""
    if status:
        return f"HTTP {status}"
    head, _, rest = (error or "error").partition(":")
    name = re.match(r"\s*([A-Za-z_][\w.]*)", rest)
    if head == "callback error" and name:
        return f"{head}: {name.group(1)}"
    return head.strip()[:60] or "error"


def quarantine_reasons(fields: Mapping[str, list[str]]) -> list[str]:
    """The counted reasons of a quarantined item, one per field: ``<field> missing`` or ``<field> invalid``."""
    return [f"{name or 'item'} {'missing' if reasons and reasons[0] == f'missing {name}' else 'invalid'}"
            for name, reasons in fields.items()]


def count_item(counts: dict[str, int], type_name: str, fields: tuple[str, ...], values: Mapping[str, Any],
               valid: bool) -> list[str]:
    """Count one item that reached validation into ``counts``; returns the fields it lacks."""
    counts["items"] = counts.get("items", 0) + 1
    outcome = "valid" if valid else "invalid"
    counts[outcome] = counts.get(outcome, 0) + 1
    counts[f"t|{type_name}"] = counts.get(f"t|{type_name}", 0) + 1
    lacking = []
    for name in fields:
        if is_empty(values.get(name)):
            lacking.append(name)
        else:
            key = f"f|{type_name}|{name}"
            counts[key] = counts.get(key, 0) + 1
    return lacking


def decode(raw: Mapping[Any, Any] | None) -> dict[str, int]:
    """A figures hash as Redis returns it, as ``{field: int}``."""
    return {(k.decode() if isinstance(k, bytes) else k): int(v) for k, v in (raw or {}).items()}


def add(*figures: Mapping[str, int]) -> dict[str, int]:
    total: dict[str, int] = {}
    for one in figures:
        for k, v in one.items():
            total[k] = total.get(k, 0) + v
    return total


def when(ts: float | None) -> str:
    """A time as the quality views print it ("-" for none)."""
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts)) if ts else "-"


def percent(value: float | None, digits: int = 0) -> str:
    return "-" if value is None else f"{value:.{digits}%}"


def share(part: float, whole: float) -> float:
    return part / whole if whole else 1.0


@dataclass
class Figures:
    """One cycle's (or window's) figures, read."""

    raw: dict[str, int]

    def get(self, name: str) -> int:
        return self.raw.get(name, 0)

    def types(self) -> dict[str, int]:
        return {k[2:]: v for k, v in self.raw.items() if k.startswith("t|")}

    def coverage(self) -> dict[str, float]:
        """``Type.field`` -> share of the type's items with the field non-empty."""
        types = self.types()
        return {f"{t}.{f}": v / types[t] for t, f, v in
                ((k.split("|")[1], k.split("|")[2], v) for k, v in self.raw.items() if k.startswith("f|"))
                if types.get(t)}

    def fields_seen(self, type_name: str) -> list[str]:
        return sorted(k.split("|")[2] for k in self.raw if k.startswith(f"f|{type_name}|"))

    def patterns(self) -> dict[str, dict[str, float]]:
        """pattern -> {pages, items, per_page}."""
        found: dict[str, dict[str, float]] = {}
        for k, v in self.raw.items():
            if k.startswith("p|"):
                pattern, what = k[2:].rsplit("|", 1)  # a pattern (a regex) may hold a "|"
                found.setdefault(pattern, {"pages": 0, "items": 0})[what] = v
        for entry in found.values():
            entry["per_page"] = entry["items"] / entry["pages"] if entry["pages"] else 0.0
        return found

    def by_prefix(self, prefix: str) -> dict[str, int]:
        return {k[len(prefix):]: v for k, v in self.raw.items() if k.startswith(prefix)}


def references(baseline: Figures | None, floors: Mapping[str, float], min_items: int) -> dict[str, float]:
    """``Type.field`` -> the coverage it is held to: the baseline cycle's (enough items), else its floor."""
    refs = dict(floors)
    if baseline is not None:
        types = baseline.types()
        for name, value in baseline.coverage().items():
            if types.get(name.split(".")[0], 0) >= min_items:
                refs[name] = value
    return {k: v for k, v in refs.items() if v > 0}


def score(figures: Figures, baseline: Figures | None, floors: Mapping[str, float], min_items: int) -> float:
    """The cycle's quality score, 0..100 (the module's docstring has the formula)."""
    valid = share(figures.get("valid"), figures.get("items"))
    healthy = 1.0 - share(figures.get("broken"), figures.get("pages")) if figures.get("pages") else 1.0
    delivered = share(figures.get("pages"), figures.get("pages") + figures.get("dlq"))
    refs = references(baseline, floors, min_items)
    now = figures.coverage()
    types = figures.types()
    ratios = [min(1.0, now.get(name, 0.0) / ref) for name, ref in refs.items() if types.get(name.split(".")[0])]
    coverage = sum(ratios) / len(ratios) if ratios else 1.0
    return round(100 * valid * healthy * delivered * coverage, 1)


@dataclass(frozen=True)
class Limits:
    """The settings findings are judged by (docs/quality.md)."""

    min_items: int = 20
    min_pages: int = 5
    coverage_margin: float = 0.2
    quarantine_max: float = 0.1
    dlq_max: float = 0.1

    @classmethod
    def from_settings(cls, settings: Any) -> Limits:
        return cls(min_items=settings.getint("QUALITY_MIN_ITEMS"), min_pages=settings.getint("QUALITY_MIN_PAGES"),
                   coverage_margin=settings.getfloat("QUALITY_COVERAGE_MARGIN"),
                   quarantine_max=settings.getfloat("QUALITY_QUARANTINE_MAX"),
                   dlq_max=settings.getfloat("QUALITY_DLQ_MAX"))


RATE_TEXT = {"quarantine": ("quarantine", "items quarantined fast", "items quarantined"),
             "dlq": ("dead letters", "requests dead-lettered fast", "requests dead-lettered")}


def rate_event(holding: dict[str, dict[str, Any]], healthy: set[str], kind: str, recent: Figures,
               baseline: Figures | None, part: str, whole: tuple[str, ...], limit: float, enough: int,
               prefix: str) -> None:
    """The ``rate:<kind>`` finding: ``part`` over the sum of ``whole`` above ``limit`` (with ``enough`` of them)."""
    total = sum(recent.get(name) for name in whole)
    if total < enough:
        return
    rate = recent.get(part) / total
    if rate <= limit:
        healthy.add(f"rate:{kind}")
        return
    subject, what, counted = RATE_TEXT[kind]
    base_total = sum(baseline.get(name) for name in whole) if baseline is not None else 0
    reasons = sorted(recent.by_prefix(prefix).items(), key=lambda kv: -kv[1])[:3]
    holding[f"rate:{kind}"] = {
        "kind": kind, "subject": subject, "what": what,
        "why": f"{rate:.0%} of {total} {counted} (limit {limit:.0%}): " + ", ".join(f"{r} x{n}" for r, n in reasons),
        "baseline": round(baseline.get(part) / base_total, 4) if baseline is not None and base_total else None,
        "figure": round(rate, 4)}


def findings(recent: Figures, baseline: Figures | None, floors: Mapping[str, float],
             limits: Limits) -> tuple[dict[str, dict[str, Any]], set[str]]:
    """What the recent figures say: (the events that hold, by key; the keys the figures show healthy).

    A key in neither had too little to go on (fewer than ``min_items`` items or ``min_pages`` pages)."""
    holding: dict[str, dict[str, Any]] = {}
    healthy: set[str] = set()
    types = recent.types()
    coverage = recent.coverage()
    base_types = baseline.types() if baseline is not None else {}
    base_coverage = baseline.coverage() if baseline is not None else {}
    for type_name, count in types.items():
        if count < limits.min_items:
            continue
        names = {f"{type_name}.{f}" for f in recent.fields_seen(type_name)}
        names |= {n for n in (*floors, *base_coverage) if n.startswith(type_name + ".")}
        for name in sorted(names):
            key = f"coverage:{name}"
            now = coverage.get(name, 0.0)
            floor = floors.get(name)
            before = base_coverage.get(name) if base_types.get(type_name, 0) >= limits.min_items else None
            if floor is not None and now < floor:
                holding[key] = {"kind": "coverage", "subject": name, "what": f"{name} coverage below its floor",
                                "why": f"{now:.0%} of {count} {type_name} items have {name.split('.')[1]}, "
                                       f"its floor is {floor:.0%}", "baseline": before, "figure": round(now, 4)}
            elif before is not None and before - now > limits.coverage_margin:
                holding[key] = {"kind": "coverage", "subject": name, "what": f"{name} coverage fell",
                                "why": f"{now:.0%} of {count} {type_name} items have {name.split('.')[1]}, "
                                       f"{before:.0%} in the last cycle", "baseline": round(before, 4),
                                "figure": round(now, 4)}
            else:
                healthy.add(key)
    for kind, part, whole, limit, enough, prefix in (
            ("quarantine", "invalid", ("items",), limits.quarantine_max, limits.min_items, "q|"),
            ("dlq", "dlq", ("pages", "dlq"), limits.dlq_max, limits.min_pages, "d|")):
        rate_event(holding, healthy, kind, recent, baseline, part, whole, limit, enough, prefix)
    base_patterns = baseline.patterns() if baseline is not None else {}
    for pattern, now_p in recent.patterns().items():
        before_p = base_patterns.get(pattern)
        if now_p["pages"] < limits.min_pages or not before_p or before_p["items"] <= 0:
            continue
        if now_p["items"] == 0:
            holding[pattern] = {"kind": "extraction", "subject": pattern, "pattern": pattern,
                                "what": "extraction broken",
                                "why": f"{before_p['per_page']:.1f} items per page in the last cycle, none in "
                                       f"{int(now_p['pages'])} pages now", "baseline": round(before_p["per_page"], 2),
                                "figure": 0.0}
        else:
            healthy.add(pattern)
    return holding, healthy


# -- reading the figures (crawlhub quality, status, ui, report) ------------------------------------------
def _cycles(server: redis.Redis, spider: str) -> list[tuple[str, float]]:
    rows: list[tuple[bytes, float]] = server.zrange(quality_keys(spider)["cycles"], -20, -1, withscores=True)  # type: ignore[assignment]
    return [(c.decode(), s) for c, s in rows]


def cycle_figures(figures: Figures, baseline: Figures | None, floors: dict[str, float], min_items: int) -> dict[str, Any]:
    """One cycle's figures as the report shows them (against ``baseline``)."""
    base_cov = baseline.coverage() if baseline is not None else {}
    base_pat = baseline.patterns() if baseline is not None else {}
    refs = references(baseline, floors, min_items)
    return {
        "pages": figures.get("pages"), "broken_pages": figures.get("broken"), "items": figures.get("items"),
        "valid_share": round(figures.get("valid") / figures.get("items"), 4) if figures.get("items") else None,
        "quarantined": figures.get("invalid"), "quarantined_by_reason": figures.by_prefix("q|"),
        "dlq": figures.get("dlq"), "dlq_by_reason": figures.by_prefix("d|"),
        "patterns": {p: {"pages": int(v["pages"]), "items": int(v["items"]), "per_page": round(v["per_page"], 2),
                         "baseline_per_page": round(base_pat[p]["per_page"], 2) if p in base_pat else None}
                     for p, v in sorted(figures.patterns().items())},
        "coverage": {name: {"share": round(value, 4), "baseline": round(base_cov[name], 4) if name in base_cov
                            else None, "floor": floors.get(name), "reference": refs.get(name)}
                     for name, value in sorted(figures.coverage().items())},
        "score": score(figures, baseline, floors, min_items),
    }


def quality_report(server: redis.Redis, spider: str, closed: int = 20, pages: bool = True) -> dict[str, Any]:
    """Everything ``crawlhub quality`` shows, as a dict (``--json``; the UI and the report read it too).
    ``pages=False``: the broken pages counted, not listed (status, polled by the UI)."""
    keys = quality_keys(spider)
    pipe = server.pipeline(transaction=False)
    pipe.hvals(keys["events"])
    pipe.hvals(keys["broken"]) if pages else pipe.hlen(keys["broken"])
    pipe.lrange(keys["closed"], 0, closed - 1)
    pipe.lrange(keys["alerts"], 0, 19)
    pipe.hgetall(keys["meta"])
    events, broken, done, alerts, info = pipe.execute()
    info = {k.decode(): v.decode() for k, v in info.items()}
    floors = json.loads(info.get("floors") or "{}")
    limits = json.loads(info.get("limits") or "{}")
    min_items = int(limits.get("min_items", 20))
    score_min = float(info.get("score_min") or 0)
    cycles = _cycles(server, spider)
    current = previous = None
    if cycles:
        current = cycles[-1][0]
        previous = cycles[-2][0] if len(cycles) > 1 else None
    now_fig = Figures(decode(server.hgetall(keys["cycle"] + current))) if current else Figures({})
    base_fig = Figures(decode(server.hgetall(keys["cycle"] + previous))) if previous else None
    figures = cycle_figures(now_fig, base_fig, floors, min_items)
    below = bool(score_min) and bool(now_fig.get("items") or now_fig.get("pages")) and figures["score"] < score_min
    return {
        "spider": spider,
        "healthy": not events and not below,
        "cycle": {"id": current, "started": dict(cycles).get(current) if current else None, "kind": info.get("cycle")},
        "baseline_cycle": {"id": previous, "started": dict(cycles).get(previous)} if previous else None,
        "score": figures["score"], "score_min": score_min, "score_below_min": below,
        "figures": figures,
        "baseline": cycle_figures(base_fig, None, floors, min_items) if base_fig is not None else None,
        "events": sorted((json.loads(e) for e in events), key=lambda e: e["since"]),
        "broken": sorted((json.loads(b) for b in broken), key=lambda b: (b["pattern"], b["url"])) if pages else [],
        "broken_count": len(broken) if pages else broken,
        "closed": [json.loads(e) for e in done],
        "alerts": [json.loads(a) for a in alerts],
    }
