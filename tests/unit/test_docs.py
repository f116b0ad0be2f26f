"""The README's settings table and docs/redis-keys.md list what the code has."""

from __future__ import annotations

import re

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


def test_every_setting_is_in_the_readme_table():
    readme = (ROOT / "README.md").read_text()
    table = set(re.findall(r"^\| `([A-Z_]+)` \|", readme, flags=re.M))
    names = {n for n in dir(project_settings) if n.isupper()} - WIRING
    assert names - table == set(), "settings missing from the README table"
    assert table - names == set(), "README lists settings that do not exist"


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
