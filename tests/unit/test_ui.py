"""`crawlhub ui`: the page in Debian's Chromium (through Playwright) over a real 2-worker crawl, and its API."""


from __future__ import annotations

import json


def test_loopback_names_and_json_safe_latencies():
    from crawlhub.ui.app import finite, is_loopback

    assert all(map(is_loopback, ("127.0.0.1", "127.3.4.5", "localhost", "::1", "[::1]", "LOCALHOST")))
    assert not any(map(is_loopback, ("0.0.0.0", "10.0.0.1", "::", "example.com", "127.0.0.1.example.com", "")))
    assert finite({"p95": float("inf"), "rows": [{"ms": float("inf")}, 2.5]}) == {"p95": "inf", "rows": [{"ms": "inf"}, 2.5]}
    json.dumps(finite({"x": float("nan")}), allow_nan=False)
