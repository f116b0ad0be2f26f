"""deploy/: the files parse, set only real settings, run only real commands, pin
their images; and SIGTERM, which every deployment sends, stops a worker cleanly.

No Docker engine or Kubernetes cluster runs here, so the files are checked by
reading them (and with `docker compose config` when a Docker client with the
compose plugin is present).
"""


from __future__ import annotations

import re
import shutil
import signal
import subprocess
import time

import pytest

from tests.harness import cli, run_workers, start_worker, wait_for
from tests.sites.shop import shop_pages
from tests.unit.test_deploy import DEPLOY, yaml_docs


def test_the_alert_rules_pass_their_promtool_unit_tests():
    """deploy/prometheus/alerts_test.yml: each rule fires when it should, once per spider, with its text
    (promtool comes with Debian's prometheus package, installed by `make setup`)."""
    promtool = shutil.which("promtool")
    assert promtool, "promtool is missing: `make setup` installs Debian's prometheus package for it"
    checked = subprocess.run([promtool, "check", "rules", "alerts.yml", "quality-alerts.yml"],
                             cwd=DEPLOY / "prometheus", capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    tested = subprocess.run([promtool, "test", "rules", "alerts_test.yml"], cwd=DEPLOY / "prometheus",
                            capture_output=True, text=True)
    assert tested.returncode == 0 and "SUCCESS" in tested.stdout, tested.stdout + tested.stderr
    rules = {r["alert"]: r["expr"] for name in ("alerts.yml", "quality-alerts.yml")
             for g in yaml_docs(DEPLOY / "prometheus" / name)[0]["groups"] for r in g["rules"]}
    exercised = set(re.findall(r"alertname: (\w+)", (DEPLOY / "prometheus" / "alerts_test.yml").read_text()))
    assert {"CrawlhubQualityEventOpen", "CrawlhubQualityScoreLow"} <= exercised <= set(rules), (exercised, rules)
    # the quality rules read what the workers expose
    from prometheus_client import generate_latest

    from crawlhub.stats import Metrics

    metrics = Metrics()
    metrics.quality("s", 97.5, {"Product.price": 0.9}, {"extraction": 1})
    exposed = set(re.findall(r"^(crawlhub_[a-z_]+)", generate_latest(metrics.registry).decode(), flags=re.M))
    used = {n for name in ("CrawlhubQualityEventOpen", "CrawlhubQualityScoreLow")
            for n in re.findall(r"crawlhub_[a-z_]+", rules[name])}
    assert used == {"crawlhub_quality_events", "crawlhub_quality_score"} and used <= exposed, exposed
    for config in ("prometheus.yml", "prometheus-compose.yml"):
        assert "quality-alerts.yml" in yaml_docs(DEPLOY / "prometheus" / config)[0]["rule_files"], config


def has_compose() -> bool:
    return bool(shutil.which("docker")) and subprocess.run(["docker", "compose", "version"], capture_output=True).returncode == 0


@pytest.mark.skipif(not has_compose(), reason="no Docker client with the compose plugin here")
def test_docker_compose_validates_the_file():  # pragma: no cover - needs the compose plugin
    out = subprocess.run(["docker", "compose", "--env-file", str(DEPLOY / ".env.example"),
                          "-f", str(DEPLOY / "docker-compose.yml"), "config", "--quiet"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr


@pytest.mark.skipif(not shutil.which("systemd-analyze"), reason="no systemd-analyze here")
def test_systemd_unit_verifies(tmp_path):
    unit = tmp_path / "crawlhub-worker@scrapeme.service"
    unit.write_text((DEPLOY / "systemd" / "crawlhub-worker@.service").read_text())
    out = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True, text=True)
    # the only complaint allowed: the install path does not exist on the test machine
    problems = [line for line in (out.stdout + out.stderr).splitlines()
                if line.strip() and "/opt/crawlhub/.venv/bin/scrapy is not executable" not in line]
    assert problems == [], problems


def test_sigterm_releases_leases_at_once_and_loses_nothing(env, site, redis_client, mongo_db, tmp_path):
    pages = shop_pages(30 * 4, 4)
    shop = site(pages, delay=0.3)
    env = {**env, "LEASE_TTL": "120", "CONCURRENT_REQUESTS": "4"}
    redis_client.lpush("scrapeme:start_urls", f"{shop.url}/shop/")
    worker = start_worker("scrapeme", env, tmp_path / "a", "first")
    wait_for(lambda: len(shop.fetched("/shop")) >= 6, 60, step=0.1)  # mid-crawl
    assert redis_client.zcard("scrapeme:inflight") > 0, "mid-crawl: it holds leases"
    healthy = cli(env, "health", "scrapeme")
    assert healthy.returncode == 0 and healthy.stdout.startswith("healthy"), healthy.stderr
    worker.proc.send_signal(signal.SIGTERM)
    stopped_at = time.monotonic()
    code = worker.proc.wait(timeout=30)
    took = time.monotonic() - stopped_at
    assert code == 0 and took < 15, f"exit {code} after {took:.1f}s (grace period 30 s)"
    assert redis_client.zcard("scrapeme:inflight") == 0, "its leases are released at exit, not after LEASE_TTL (120 s)"
    log = worker.log()
    assert "shutting down gracefully" in log.lower()
    gone = cli(env, "health", "scrapeme")
    assert gone.returncode == 1 and "unhealthy" in gone.stderr
    stored_then = mongo_db.products.count_documents({})
    fetched_then = set(shop.fetched("/shop"))
    assert stored_then == len(fetched_then) * 4, "every page it fetched has its items stored"

    run_workers("scrapeme", env, tmp_path / "b", 1, timeout=120)
    assert set(shop.fetched("/shop")) == set(pages)
    assert mongo_db.products.count_documents({}) == len(pages) * 4, "nothing lost, nothing twice"
    print(f"SIGTERM with leases held: exited in {took:.1f}s, {len(fetched_then)} pages done before it")
