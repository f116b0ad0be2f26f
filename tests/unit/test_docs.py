"""The docs list what the code has: the settings reference (generated from default_settings.py), the README's
links, docs/redis-keys.md; and the docs site builds with broken links and anchors as errors."""

from __future__ import annotations

import html
import importlib.util
import logging
import re
import shutil
import sys
from functools import cache
from pathlib import Path
from types import ModuleType
from urllib.parse import unquote, urlsplit

import markdown
import pytest
import yaml
from mkdocs.commands.build import build
from mkdocs.config import load_config
from mkdocs.exceptions import Abort

from crawlhub import default_settings as project_settings
from crawlhub.cli import spider_keys
from tests.harness import ROOT
from tests.helpers import project_settings as settings_dict

# Scrapy wiring, not user configuration
WIRING = {
    "BOT_NAME", "SPIDER_MODULES", "NEWSPIDER_MODULE", "TEMPLATES_DIR", "SCHEDULER", "DUPEFILTER_CLASS",
    "SCHEDULER_QUEUE_CLASS", "EXTENSIONS", "ITEM_PIPELINES", "TWISTED_REACTOR", "FEED_EXPORT_ENCODING",
    "CRAWLHUB_ENV_OVERRIDES", "DOWNLOADER_MIDDLEWARES", "SPIDER_MIDDLEWARES",
}
README_MAX_LINES = 250


@cache
def reference_hook() -> ModuleType:
    """docs/hooks/settings_reference.py, the MkDocs hook that writes the settings reference (loaded by its path,
    as MkDocs loads it)."""
    spec = importlib.util.spec_from_file_location("docs_settings_reference", ROOT / "docs/hooks/settings_reference.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def reference_names(reference: str) -> list[str]:
    """The settings the reference's entries are for, in the page's order (each entry's heading names them)."""
    return [name for heading in re.findall(r"^###+ (.*)$", reference, flags=re.M)
            for name in re.findall(r"`([A-Z][A-Z0-9_]*)`", heading)]


def render(text: str) -> str:
    """Markdown as the docs site renders it (mkdocs.yml's extensions: the same heading anchors)."""
    extensions, configs = [], {}
    for entry in yaml.safe_load((ROOT / "mkdocs.yml").read_text())["markdown_extensions"]:
        name, config = next(iter(entry.items())) if isinstance(entry, dict) else (entry, None)
        extensions.append(name)
        if config:
            configs[name] = config
    return markdown.Markdown(extensions=extensions, extension_configs=configs).convert(text)


@cache
def anchors(page: Path) -> set[str]:
    """The ids a link's #fragment may name on a page (its headings' slugs, explicit ids), the settings
    reference's generated part included."""
    text = page.read_text()
    if page == ROOT / "docs" / "settings.md":
        text = text.replace(reference_hook().PLACEHOLDER, reference_hook().reference_markdown())
    return {html.unescape(i) for i in re.findall(r'\bid="([^"]+)"', render(text))}


def test_every_setting_is_in_the_settings_reference():
    reference = reference_hook().reference_markdown()
    listed = set(reference_names(reference))
    defined = {n for n in dir(project_settings) if n.isupper()}
    names = defined - WIRING
    assert names - listed == set(), "settings missing from the settings reference (docs/settings.md)"
    assert listed - defined == set(), "the settings reference lists settings that do not exist"
    # each has its anchor (settings.md#domain_rate), on the page as the site renders it
    ids = anchors(ROOT / "docs" / "settings.md")
    missing = {n for n in listed if n.lower() not in ids}
    assert missing == set(), "settings without their anchor in the reference"


def test_user_settings_exist_and_come_first():
    user = list(project_settings.user_settings)
    assert 10 <= len(user) <= 25, "the settings users set are the few a spider or a deployment needs"
    defined = {n for n in dir(project_settings) if n.isupper()}
    assert [n for n in user if n not in defined] == [], "user_settings names settings that do not exist"
    order = reference_names(reference_hook().reference_markdown())
    assert [n for n in order if n in user] == user, "the user settings' entries, in user_settings' order"
    tuning = [i for i, n in enumerate(order) if n not in user]
    assert max(order.index(n) for n in user) < min(tuning), "a tuning setting before a user one"
    # the summary table at the top names them all, each linked to its entry
    table = reference_hook().reference_markdown().split("\n### ", 1)[0]
    assert re.findall(r"^\| \[`([A-Z_0-9]+)`\]\(#([a-z_0-9]+)\)", table, flags=re.M) == [(n, n.lower()) for n in user]


def test_the_reference_is_read_from_the_comments(tmp_path):
    """What the generator reads from a default_settings module: sections, comments, shared comments, defaults as
    written, the user settings first; a user setting that does not exist fails the build."""
    module = tmp_path / "default_settings.py"
    module.write_text('''"""Docstring: # --- Not a section ---"""
from typing import Any

user_settings = {"B_RATE": "the rate"}

# --- First ---------------
# A's comment,
# on two lines.
A_SIZE = 4 * 1024
A_MORE: dict[str, Any] = {}

# --- Second (docs/politeness.md) ---
# B: like A_SIZE, `B_RATE = "x"` in code; <spider>:key stays text.
B_RATE = "4/s"
C_FLAG = True
''')
    reference = reference_hook().reference_markdown(module)
    assert reference_names(reference) == ["B_RATE", "A_SIZE", "A_MORE", "C_FLAG"]
    assert "| [`B_RATE`](#b_rate) | `\"4/s\"` | the rate |" in reference
    assert "A_SIZE = 4 * 1024\nA_MORE: dict[str, Any] = {}" in reference
    assert "A's comment, on two lines." in reference
    assert "## First" in reference and "## Second" in reference and "See [docs/politeness.md](politeness.md)." in reference
    assert "like [A_SIZE](#a_size), `B_RATE = \"x\"` in code; &lt;spider&gt;:key" in reference
    # C_FLAG has no comment of its own: it shares B_RATE's, shown with it in the tuning part
    second = reference.split("## Second", 1)[1]
    assert "C_FLAG = True" in second and "B: like" in second
    ids = set(re.findall(r'\bid="([^"]+)"', render(reference)))
    assert {"a_size", "a_more", "b_rate", "c_flag"} <= ids
    module.write_text(module.read_text().replace('{"B_RATE"', '{"NO_SUCH"'))
    with pytest.raises(ValueError, match="NO_SUCH"):
        reference_hook().reference_markdown(module)


def broken_links(page: Path, text: str | None = None) -> list[str]:
    """The relative links and images of a Markdown page that name no file, or an anchor its page does not have."""
    broken = []
    for target in re.findall(r'(?:href|src)="([^"]+)"', render(page.read_text() if text is None else text)):
        link = urlsplit(html.unescape(target))
        if link.scheme or link.netloc:
            continue
        linked = (page.parent / unquote(link.path)).resolve() if link.path else page
        if not linked.exists():
            broken.append(f"{target}: no such file")
        elif link.fragment and linked.suffix == ".md" and link.fragment not in anchors(linked):
            broken.append(f"{target}: no such anchor in {linked.relative_to(ROOT)}")
    return broken


def test_readme_links_resolve():
    assert broken_links(ROOT / "README.md") == [], "README.md links to what does not exist"


def test_readme_is_short():
    lines = len((ROOT / "README.md").read_text().splitlines())
    assert lines < README_MAX_LINES, f"README.md is {lines} lines: the rest belongs in docs/"


def test_docs_site_builds_strict(tmp_path):
    """`make docs` as `make test` runs it: warnings (a broken link, a missing anchor, a page not in the nav) are
    errors."""
    build(load_config(str(ROOT / "mkdocs.yml"), site_dir=str(tmp_path / "site")))
    assert (tmp_path / "site" / "settings" / "index.html").is_file()


def test_docs_site_fails_on_a_broken_link_or_anchor(tmp_path, caplog):
    docs = tmp_path / "docs"
    shutil.copytree(ROOT / "docs", docs, ignore=shutil.ignore_patterns("hooks", "__pycache__"))
    with (docs / "redis-keys.md").open("a") as page:
        page.write("\n[a page](no-such-page.md), [an anchor](settings.md#no_such_setting)\n")
    with caplog.at_level(logging.WARNING, logger="mkdocs"), pytest.raises(Abort):
        build(load_config(str(ROOT / "mkdocs.yml"), docs_dir=str(docs), site_dir=str(tmp_path / "site")))
    assert "no-such-page.md" in caplog.text and "no_such_setting" in caplog.text


def test_every_redis_key_is_documented():
    doc = (ROOT / "docs" / "redis-keys.md").read_text()
    from scrapy.settings import Settings

    for key in spider_keys(Settings(settings_dict()), "<spider>").values():
        assert f"`{key}`" in doc, key


def test_per_domain_keys_are_documented():
    from crawlhub.frontier import keys

    doc = (ROOT / "docs" / "redis-keys.md").read_text()
    for key in (keys.LIMITS, keys.DOMAINS, keys.domain_state("<domain>"), keys.domain_active("<domain>"),
                keys.robots("<origin>"), keys.BROWSER_DOMAINS, keys.browser_counts("<domain>")):
        assert f"`{key}`" in doc, key


def test_proxy_and_profile_keys_are_documented():
    from crawlhub import profiles, proxies

    doc = (ROOT / "docs" / "redis-keys.md").read_text()
    for key in (proxies.REGISTRY, proxies.HEALTH, proxies.DEAD, proxies.DOMAINS, proxies.STICKY, profiles.STICKY,
                proxies.cool_key("<domain>"), proxies.strikes_key("<domain>"), proxies.tier_key("<domain>"),
                proxies.tier_bans_key("<domain>", "<pool>")):
        assert f"`{key}`" in doc, key
