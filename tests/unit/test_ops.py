"""Cluster stats, status arithmetic, the report and the deploy/ monitoring files, without workers.

The stats flush runs against the tests' real Redis.
"""


from __future__ import annotations

import json
import time

import pytest

from crawlhub import stats as st
from crawlhub.monitor.auditlog import log_entry
from crawlhub.monitor.report import html_report
from crawlhub.monitor.status import pages_per_minute, worker_rows


def test_status_classes_buckets_and_percentiles():
    assert [st.status_class(s) for s in (200, 301, 404, 503, None)] == ["2xx", "3xx", "4xx", "5xx", "error"]
    # a 3 ms answer is in the 5 ms bucket (it was 25 ms, the lowest, which read as "25 ms" for local pages)
    assert [st.latency_bucket(ms) for ms in (3, 25, 26, 700, 40000)] == ["5", "25", "50", "1000", "inf"]
    hist = {"25": 50, "100": 40, "1000": 9, "inf": 1}
    assert st.percentile(hist, 0.5) == 25 and st.percentile(hist, 0.95) == 1000 and st.percentile(hist, 1.0) == float("inf")
    assert st.percentile({}, 0.5) is None


def test_pages_per_minute_counts_whole_minutes_and_the_part_inside_the_window():
    now = 1_000_000 * 60 + 30  # half way through a minute
    m = int(now // 60)
    minutes = {m: {"2xx": 30}, m - 1: {"2xx": 60, "error": 5}, m - 2: {"2xx": 60}, m - 5: {"2xx": 60}}
    assert pages_per_minute(minutes, now, 1) == pytest.approx(30 + 60 * 0.5)  # this minute + half of the last
    assert pages_per_minute(minutes, now, 5) == pytest.approx((30 + 60 + 60 + 60 * 0.5) / 5)
    # a crawl that started 20 s ago: its rate, not diluted over 5 minutes
    assert pages_per_minute({m: {"2xx": 10}}, now, 5, started=now - 20) == pytest.approx(30)


def test_workers_are_dead_after_their_heartbeat_timeout():
    now = time.time()
    raw = {b"a": json.dumps({"worker": "a", "state": "running", "last_beat": now - 2, "started_at": 1}),
           b"b": json.dumps({"worker": "b", "state": "running", "last_beat": now - 20, "started_at": 2}),
           b"c": json.dumps({"worker": "c", "state": "finished", "last_beat": now - 99, "started_at": 3})}
    rows = {w["worker"]: (w["state"], w["alive"]) for w in worker_rows(raw, now, dead_after=15)}
    assert rows == {"a": ("running", True), "b": ("dead", False), "c": ("finished", False)}


def test_the_report_is_one_self_contained_page():
    status = {"spider": "s", "time": time.time(), "totals": {"requests": 3, "2xx": 2, "3xx": 0, "4xx": 1, "5xx": 0,
                                                              "error": 0, "items": 8},
              "dlq": 0, "queued": 0, "workers_alive": 0,
              "domains": [{"domain": "a.example", "requests": 3, "p50_ms": 100.0, "p95_ms": 250.0}],
              "items": {"stored": {"products": 8}, "quarantined": 1}}
    page = html_report({"status": status, "series": [{"minute": 29_000_000, "2xx": 2, "4xx": 1}]})
    assert page.count('<svg class="chart"') == 4 and "<script" not in page and "src=" not in page
    assert 'class="bar"' in page and 'class="point"' in page


def test_log_entries_decode():
    raw = {b"t": b"1.5", b"url": b"https://a/", b"domain": b"a", b"worker": b"h:1", b"status": b"", b"error": b"Boom",
           b"ms": b"12.5", b"bytes": b"0", b"proxy": b"", b"browser": b"0"}
    assert log_entry(raw) == {"time": 1.5, "url": "https://a/", "domain": "a", "worker": "h:1", "status": None,
                              "error": "Boom", "ms": 12.5, "bytes": 0, "proxy": "", "browser": False}
