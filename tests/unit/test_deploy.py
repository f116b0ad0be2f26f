"""deploy/: the files parse, set only real settings, run only real commands, pin
their images; and SIGTERM, which every deployment sends, stops a worker cleanly.

No Docker engine or Kubernetes cluster runs here, so the files are checked by
reading them (and with `docker compose config` when a Docker client with the
compose plugin is present).
"""


from __future__ import annotations

import json
import re
from pathlib import Path

import yaml

from crawlhub import default_settings as project_settings
from tests.harness import ROOT

DEPLOY = ROOT / "deploy"


SETTINGS = {n for n in dir(project_settings) if n.isupper()}


# variables of the deployment itself, not crawlhub settings (docs/deploy.md lists them)
DEPLOY_VARS = {"CRAWLHUB_SPIDER", "REDIS_PASSWORD", "MONGO_USER", "MONGO_PASSWORD", "WORKER_IMAGE", "WITH_CHROMIUM",
               "GRAFANA_PASSWORD", "MONGO_INITDB_ROOT_USERNAME", "MONGO_INITDB_ROOT_PASSWORD", "GF_SECURITY_ADMIN_PASSWORD",
               "PYTHONUNBUFFERED", "HOME", "BROWSER_WORKER_IMAGE", "BROWSER_WORKERS", "BROWSER_CONCURRENT_REQUESTS"}


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
