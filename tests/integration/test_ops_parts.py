"""Cluster stats, status arithmetic, the report and the deploy/ monitoring files, without workers.

The stats flush runs against the tests' real Redis.
"""


from __future__ import annotations

import json
import re
from types import SimpleNamespace

import yaml
from prometheus_client import generate_latest
from scrapy import Request, Spider
from scrapy.http import HtmlResponse
from scrapy.settings import Settings
from scrapy.utils.test import get_crawler

from crawlhub import stats as st
from crawlhub.downloadermiddlewares import stats as stats_mw
from crawlhub.frontier.keys import Keys
from crawlhub.monitor.auditlog import matches, read_log
from tests.harness import ROOT
from tests.helpers import project_settings


def middleware(redis_client, **settings):
    crawler = get_crawler(Spider, settings_dict=project_settings(**settings))
    crawler.spider = Spider("unit")
    mw = stats_mw.ClusterStatsMiddleware.from_crawler(crawler)
    scheduler = SimpleNamespace(server=redis_client, keys=Keys.for_spider(Settings(project_settings()), "unit"))
    return mw, scheduler


def test_attempts_are_counted_and_logged_in_one_flush(redis_client, monkeypatch):
    mw, scheduler = middleware(redis_client)
    monkeypatch.setattr(stats_mw, "frontier_of", lambda crawler: scheduler)
    for n, status in enumerate((200, 200, 404, 503)):
        request = Request(f"https://shop.example/{n}", meta={"crawlhub_proxy": "dc/p:1"} if n == 3 else {})
        mw.process_request(request)
        mw.process_response(request, HtmlResponse(request.url, status=status, body=b"x" * 100, request=request))
    failed = Request("https://other.example:8080/x", meta={"playwright": True})
    mw.process_request(failed)
    mw.process_exception(failed, ConnectionRefusedError("refused"))
    mw.items_stored(count=1, epoch="e1")  # crawlhub.signals.items_stored, from the MongoDB store
    mw.crawler.stats.set_value("retry/count", 3)
    mw.flush()
    totals = {k.decode(): int(v) for k, v in redis_client.hgetall(st.totals_key("unit")).items()}
    assert {k: totals[k] for k in ("requests", "2xx", "4xx", "5xx", "error", "items@e1", "retries", "bytes")} == {
        "requests": 5, "2xx": 2, "4xx": 1, "5xx": 1, "error": 1, "items@e1": 1, "retries": 3, "bytes": 400}
    assert totals["d|shop.example|requests"] == 4 and totals["d|other.example:8080|error"] == 1
    assert sum(v for k, v in totals.items() if k.startswith("lat:")) == 5
    minute = redis_client.keys("unit:stats:m:*")
    assert len(minute) == 1 and 0 < redis_client.ttl(minute[0]) <= 172800
    entries, _ = read_log(redis_client, "unit", 10)
    assert [(e["url"], e["status"]) for e in entries] == [
        ("https://shop.example/0", 200), ("https://shop.example/1", 200), ("https://shop.example/2", 404),
        ("https://shop.example/3", 503), ("https://other.example:8080/x", None)]
    assert entries[3]["proxy"] == "dc/p:1" and entries[4]["browser"] and "ConnectionRefusedError" in entries[4]["error"]
    assert [e["url"] for e in entries if matches(e, "5xx", None)] == ["https://shop.example/3"]
    assert [e["url"] for e in entries if matches(e, "error", "other.example:8080")] == ["https://other.example:8080/x"]
    mw.crawler.stats.set_value("retry/count", 4)
    mw.flush()  # cumulative Scrapy stats: only the growth is added
    assert int(redis_client.hget(st.totals_key("unit"), "retries")) == 4


def test_counts_wait_for_redis_when_it_is_down(redis_client, monkeypatch):
    import redis as redis_lib

    mw, _ = middleware(redis_client)
    broken = SimpleNamespace(server=redis_lib.Redis(port=1, socket_connect_timeout=0.2), keys=None)
    monkeypatch.setattr(stats_mw, "frontier_of", lambda crawler: broken)
    request = Request("https://shop.example/")
    mw.process_request(request)
    mw.process_response(request, HtmlResponse(request.url, body=b"", request=request))
    mw.flush()
    assert mw.totals["requests"] == 1 and len(mw.entries) == 1, "kept for the next flush"


def test_prometheus_metrics_and_the_deploy_files_use_the_same_names():
    metrics = st.Metrics()  # no port: the registry only
    metrics.requests.labels("s", "d", "2xx").inc()
    metrics.latency.labels("s", "d").observe(0.2)
    for gauge in (metrics.items, metrics.retries, metrics.dlq, metrics.bytes):
        gauge.labels("s").inc()
    for gauge in (metrics.queue, metrics.dlq_size, metrics.inflight):
        gauge.labels("s").set(1)
    metrics.up.labels("s", "w").set(1)
    exposed = set(re.findall(r"^(crawlhub_[a-z_]+)", generate_latest(metrics.registry).decode(), flags=re.M))
    assert {"crawlhub_requests_total", "crawlhub_request_latency_seconds_bucket", "crawlhub_dlq_size"} <= exposed

    rules = yaml.safe_load((ROOT / "deploy" / "prometheus" / "alerts.yml").read_text())
    alerts = {r["alert"]: r["expr"] for g in rules["groups"] for r in g["rules"]}
    assert set(alerts) == {"CrawlhubDeadLettersGrowing", "CrawlhubNoLiveWorkers", "CrawlhubDomainErrorRate"}
    yaml.safe_load((ROOT / "deploy" / "prometheus" / "prometheus.yml").read_text())
    dashboard = json.loads((ROOT / "deploy" / "grafana" / "crawlhub.json").read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]] + list(alerts.values())
    used = {name for e in exprs for name in re.findall(r"crawlhub_[a-z_]+", e)}
    assert used and used <= exposed, f"names the workers do not expose: {used - exposed}"


def test_log_is_oldest_first_by_time_though_workers_send_in_batches(redis_client):
    """Two workers each send a batch: in the stream, one's entries follow the other's later ones."""
    from crawlhub.monitor.auditlog import read_log
    from crawlhub.stats import log_key

    for worker, times in (("w1", (10.0, 11.0, 12.0)), ("w2", (10.5, 11.5))):
        for t in times:
            redis_client.xadd(log_key("sp"), {"t": t, "url": f"http://s.example/{t}", "worker": worker, "status": 200})
    entries, _ = read_log(redis_client, "sp", 100)
    assert [e["time"] for e in entries] == [10.0, 10.5, 11.0, 11.5, 12.0]


def test_item_counts_read_this_crawls_documents_from_the_store(mongo_db):
    """`items.crawl`: the spider's documents marked with the current epoch; the valid share is taken from it,
    not from the workers' counter (which a worker killed right after a write leaves short)."""
    from crawlhub.monitor.status import item_counts

    mongo_db.products.insert_many([{"id": "1", "spiders": ["sp"], "cycles": {"sp": "e2"}},
                                   {"id": "2", "spiders": ["sp"], "cycles": {"sp": "e2"}},
                                   {"id": "3", "spiders": ["sp"], "cycles": {"sp": "e1"}}])  # an older crawl's
    mongo_db.quarantine.insert_one({"spider": "sp", "reasons": ["missing price"]})
    settings = Settings(project_settings(MONGO_DATABASE=mongo_db.name))
    counts = item_counts(settings, "sp", 0, mongo_db.client, "e2")
    assert (counts["stored"], counts["crawl"], counts["quarantined"]) == ({"products": 3}, 2, 1)
    assert counts["valid_share"] == round(2 / 3, 4)
    assert item_counts(settings, "sp", 5, mongo_db.client)["crawl"] is None, "no epoch: no crawl count"
