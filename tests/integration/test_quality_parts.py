"""Data quality (#27), the logic: contracts (JSON Schema, reasons per field), the figures, the score, the
findings that open and close events, change alerts, the webhook's payloads."""


from __future__ import annotations

import json

from tests.unit.test_quality_parts import figures


def test_the_report_judges_the_score_against_its_floor(redis_client):
    from crawlhub.quality import quality_keys, quality_report

    keys = quality_keys("sp")
    redis_client.zadd(keys["cycles"], {"e1": 1.0, "e2": 2.0})
    redis_client.hset(keys["cycle"] + "e1", mapping=figures(100, 100).raw)
    redis_client.hset(keys["cycle"] + "e2", mapping=figures(100, 40).raw)
    redis_client.hset(keys["meta"], mapping={"floors": "{}", "score_min": 80, "limits": json.dumps({"min_items": 20})})
    report = quality_report(redis_client, "sp")
    assert report["cycle"]["id"] == "e2" and report["baseline_cycle"]["id"] == "e1"
    assert report["figures"]["coverage"]["Product.price"] == {"share": 0.4, "baseline": 1.0, "floor": None,
                                                             "reference": 1.0}
    assert report["score"] == 70.0 and report["score_below_min"] and not report["healthy"], "no event, yet unhealthy"
    redis_client.hset(keys["meta"], "score_min", 60)
    assert quality_report(redis_client, "sp")["healthy"]
