"""Browser wiring without a browser: who gets the handler, where Chromium comes from."""

from __future__ import annotations

import pytest
from scrapy.exceptions import NotConfigured
from scrapy.settings import Settings

from crawlhub.browser import HANDLER, chromium_path
from spiders.quotes import QuotesSpider
from spiders.quotes_auto import QuotesAutoSpider
from spiders.quotes_js import QuotesJsSpider
from tests.helpers import project_settings


def spider_settings(spidercls, **overrides) -> Settings:
    """The settings a crawl of ``spidercls`` gets: Scrapy's spider hook, then what crawlhub's add-on does."""
    from crawlhub.addon import apply_spider, install

    settings = Settings(project_settings(**overrides))
    spidercls.update_settings(settings)
    install(settings, environ={})
    apply_spider(settings, spidercls)
    return settings


def test_only_browser_spiders_get_the_playwright_handler():
    assert HANDLER not in spider_settings(QuotesSpider).getdict("DOWNLOAD_HANDLERS").values()
    for spidercls in (QuotesJsSpider, QuotesAutoSpider):
        settings = spider_settings(spidercls, BROWSER_TIMEOUT=7)
        # (Scrapy's get_crawler disables ftp: a None entry, no handler)
        enabled = {k: v for k, v in settings.getdict("DOWNLOAD_HANDLERS").items() if v is not None}
        assert enabled == {"http": HANDLER, "https": HANDLER}
        assert settings.getdict("DOWNLOAD_HANDLERS") == {"http": HANDLER, "https": HANDLER}
        assert settings.getfloat("PLAYWRIGHT_DEFAULT_NAVIGATION_TIMEOUT") == 7000
        assert settings.getint("PLAYWRIGHT_MAX_PAGES_PER_CONTEXT") == 4
    assert HANDLER in spider_settings(QuotesSpider, BROWSER_ENABLED=True).getdict("DOWNLOAD_HANDLERS").values()


def test_chromium_path(monkeypatch, tmp_path):
    assert chromium_path(Settings({"CHROMIUM_PATH": "/opt/chrome/chrome"})) == "/opt/chrome/chrome"
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setenv("PLAYWRIGHT_BROWSERS_PATH", str(tmp_path))
    with pytest.raises(NotConfigured, match="apt-get install chromium"):
        chromium_path(Settings({"CHROMIUM_PATH": ""}))
    # where no distribution package exists, `playwright install chromium` puts one in its cache
    bundled = tmp_path / "chromium-1200" / "chrome-linux" / "chrome"
    bundled.parent.mkdir(parents=True)
    bundled.write_text("")
    assert chromium_path(Settings({"CHROMIUM_PATH": ""})) == str(bundled)


def test_browser_tests_fail_without_chromium_unless_skipped_on_purpose(tmp_path):
    """CI must not pass with the browser untested: a missing Chromium fails the browser tests."""
    import os
    import subprocess
    import sys

    from crawlhub.services import redis_server_binary
    from tests.harness import ROOT

    bin_dir = tmp_path / "bin"  # redis-server, and no Chromium anywhere
    bin_dir.mkdir()
    (bin_dir / "redis-server").symlink_to(redis_server_binary())
    env = {k: v for k, v in os.environ.items() if k != "CRAWLHUB_SKIP_BROWSER_TESTS"}
    env.update(PATH=str(bin_dir), PLAYWRIGHT_BROWSERS_PATH=str(tmp_path))
    test = "tests/test_browser.py::test_js_page_needs_the_browser_and_quotes_js_matches_quotes"
    args = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", test]
    failed = subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert failed.returncode == 1 and "the browser tests cannot run: no Chromium found" in failed.stdout, failed.stdout[-2000:]
    skipped = subprocess.run(args + ["-rs"], cwd=ROOT, env={**env, "CRAWLHUB_SKIP_BROWSER_TESTS": "1"},
                             capture_output=True, text=True, timeout=120)
    assert skipped.returncode == 0 and "1 skipped" in skipped.stdout, skipped.stdout[-2000:]
