"""deploy/: the files parse, set only real settings, run only real commands, pin
their images; and SIGTERM, which every deployment sends, stops a worker cleanly.

No Docker engine or Kubernetes cluster runs here, so the files are checked by
reading them (and with `docker compose config` when a Docker client with the
compose plugin is present).
"""

from __future__ import annotations

import json
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from crawlhub import default_settings as project_settings
from tests.harness import ROOT, cli, run_workers, start_worker
from tests.sites.shop import shop_pages

DEPLOY = ROOT / "deploy"
SETTINGS = {n for n in dir(project_settings) if n.isupper()}
# variables of the deployment itself, not crawlhub settings (docs/deploy.md lists them)
DEPLOY_VARS = {"CRAWLHUB_SPIDER", "REDIS_PASSWORD", "MONGO_USER", "MONGO_PASSWORD", "WORKER_IMAGE", "WITH_CHROMIUM",
               "GRAFANA_PASSWORD", "MONGO_INITDB_ROOT_USERNAME", "MONGO_INITDB_ROOT_PASSWORD", "GF_SECURITY_ADMIN_PASSWORD",
               "PYTHONUNBUFFERED", "HOME"}


def yaml_docs(path: Path) -> list:
    return [d for d in yaml.safe_load_all(path.read_text()) if d is not None]


def compose() -> dict:
    return yaml_docs(DEPLOY / "docker-compose.yml")[0]


def k8s() -> list[dict]:
    return [d for path in sorted((DEPLOY / "k8s").glob("*.yaml")) for d in yaml_docs(path)]


def env_file_names(path: Path) -> set[str]:
    return {line.split("=", 1)[0].strip() for line in path.read_text().splitlines()
            if line.strip() and not line.lstrip().startswith("#")}


def test_every_file_parses_and_every_image_is_pinned():
    images = []
    for path in [*DEPLOY.rglob("*.yml"), *DEPLOY.rglob("*.yaml")]:
        assert yaml_docs(path), path
    for name, service in compose()["services"].items():
        if "image" in service:
            images.append((f"compose {name}", service["image"]))
    for doc in k8s():
        spec = doc.get("spec", {}).get("template", {}).get("spec", {})
        images += [(f"k8s {doc['metadata']['name']}", c["image"]) for c in spec.get("containers", [])]
    images += [("Dockerfile", line.split()[1]) for line in (ROOT / "Dockerfile").read_text().splitlines()
               if line.startswith("FROM ")]
    assert images
    for where, image in images:
        image = re.sub(r"\$\{[A-Z_]+:-([^}]+)\}", r"\1", image)  # ${WORKER_IMAGE:-crawlhub-worker:0.1.0}
        tag = image.rsplit(":", 1)[-1] if ":" in image.split("/")[-1] else ""
        assert tag and tag != "latest" and re.search(r"\d", tag), f"{where}: image {image!r} is not pinned to a version"


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


def test_every_variable_they_set_is_a_crawlhub_setting():
    worker = compose()["services"]["worker"]
    names = set(worker.get("environment", {}))
    names |= env_file_names(DEPLOY / ".env.example")
    for doc in k8s():
        if doc["kind"] == "ConfigMap":
            names |= set(doc["data"])
        elif doc["kind"] == "Secret":
            names |= set(doc.get("stringData", {}))
        elif doc["kind"] == "Deployment":
            for c in doc["spec"]["template"]["spec"]["containers"]:
                names |= {e["name"] for e in c.get("env", [])}
    unit = (DEPLOY / "systemd" / "crawlhub-worker@.service").read_text()
    names |= {m.split("=", 1)[0] for m in re.findall(r"^Environment=\"?([A-Z_]+=[^\"\n]*)", unit, flags=re.M)}
    names |= env_file_names(DEPLOY / "systemd" / "crawlhub.env.example")
    unknown = names - SETTINGS - DEPLOY_VARS
    assert not unknown, f"not crawlhub settings: {sorted(unknown)}"
    assert {"REDIS_URL", "MONGO_URI", "CRAWLHUB_SPIDER"} <= names


def test_env_example_lists_every_variable_compose_reads():
    text = (DEPLOY / "docker-compose.yml").read_text()
    read = set(re.findall(r"\$\{([A-Z_]+)", text))
    listed = env_file_names(DEPLOY / ".env.example")
    assert read and read <= listed, f"missing from deploy/.env.example: {sorted(read - listed)}"


def commands_in_files() -> list[str]:
    found = []
    worker = compose()["services"]["worker"]
    for key in ("command", "entrypoint"):
        if key in worker:
            found.append(" ".join(worker[key]) if isinstance(worker[key], list) else worker[key])
    found += [" ".join(worker["healthcheck"]["test"][1:])]
    for doc in k8s():
        if doc["kind"] == "Deployment":
            for c in doc["spec"]["template"]["spec"]["containers"]:
                found.append(" ".join(c.get("command", []) + c.get("args", [])))
                for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
                    if probe in c:
                        found.append(" ".join(c[probe]["exec"]["command"]))
    dockerfile = (ROOT / "Dockerfile").read_text()
    found += [" ".join(json.loads(m)) for m in re.findall(r"^\s*(?:HEALTHCHECK .*)?CMD (\[.*\])$", dockerfile, flags=re.M)]
    unit = (DEPLOY / "systemd" / "crawlhub-worker@.service").read_text()
    found += re.findall(r"^Exec\w+=(.+)$", unit, flags=re.M)
    return [f for f in found if f.strip()]


def test_every_command_they_run_exists():
    from click import Group
    from scrapy.utils.project import get_project_settings

    from crawlhub.cli import known_spiders, main

    spiders = set(known_spiders(get_project_settings()))
    commands = commands_in_files()
    assert any("scrapy crawl" in c for c in commands) and any("crawlhub health" in c for c in commands)
    for line in commands:
        for words in (m.split() for m in re.findall(r"(?:crawlhub|scrapy) [^;&|]+", line)):
            if words[0] == "scrapy":
                assert words[1] == "crawl", line
                placeholders = ('"$CRAWLHUB_SPIDER"', "$CRAWLHUB_SPIDER", "${CRAWLHUB_SPIDER}", "%i")
                assert words[2] in spiders or words[2] in placeholders, line
            else:
                group, rest = main, words[1:]
                while isinstance(group, Group) and rest and not rest[0].startswith("-"):
                    assert rest[0] in group.commands, f"{line}: no command {rest[0]!r}"
                    group, rest = group.commands[rest[0]], rest[1:]


def has_compose() -> bool:
    return bool(shutil.which("docker")) and subprocess.run(["docker", "compose", "version"], capture_output=True).returncode == 0


@pytest.mark.skipif(not has_compose(), reason="no Docker client with the compose plugin here")
def test_docker_compose_validates_the_file():  # pragma: no cover - needs the compose plugin
    out = subprocess.run(["docker", "compose", "--env-file", str(DEPLOY / ".env.example"),
                          "-f", str(DEPLOY / "docker-compose.yml"), "config", "--quiet"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr


def test_the_image_install_ships_every_data_file():
    """The image installs crawlhub without -e: every non-Python file it reads must be package data."""
    import fnmatch

    import tomllib

    patterns = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["crawlhub"]
    package = ROOT / "crawlhub"
    data = [p.relative_to(package).as_posix() for p in package.rglob("*")
            if p.is_file() and p.suffix not in (".py", ".pyc") and "__pycache__" not in p.parts]
    assert "data/browser_profiles.json" in data
    missing = [f for f in data if not any(fnmatch.fnmatch(f, pattern) for pattern in patterns)]
    assert missing == [], f"not in [tool.setuptools.package-data]: {missing}"
    dockerfile = (ROOT / "Dockerfile").read_text()
    for needed in ("COPY scrapy.cfg", "COPY crawlhub", "COPY spiders", "requirements.txt"):
        assert needed in dockerfile, needed


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
    deadline = time.monotonic() + 60
    while len(shop.fetched("/shop")) < 6 and time.monotonic() < deadline:
        time.sleep(0.1)
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
