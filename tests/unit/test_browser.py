"""Browser wiring without a browser: who gets the handler, where Chromium comes from."""


from __future__ import annotations

import pytest
from playwright.async_api import Error
from playwright.async_api import TimeoutError as PlaywrightTimeout
from scrapy.exceptions import NotConfigured
from scrapy.settings import Settings

from crawlhub.browser import HANDLER, browser_failure, chromium_path
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


def test_a_browser_failure_names_whose_fault_it_is():
    launch = PlaywrightTimeout("BrowserType.launch: Timeout 1000ms exceeded.\nCall log: ...")
    assert browser_failure(launch) == "browser did not start: BrowserType.launch: Timeout 1000ms exceeded."
    assert browser_failure(Error("BrowserType.launch: Target page, context or browser has been closed")).startswith(
        "browser did not start: ")
    assert browser_failure(PlaywrightTimeout("Page.goto: Timeout 2000ms exceeded.")) == (
        "browser timeout: Page.goto: Timeout 2000ms exceeded.")
    assert browser_failure(Error("Page.goto: net::ERR_CONNECTION_REFUSED")) is None, "Scrapy's retry handles it"
    assert browser_failure(ValueError("BrowserType.launch")) is None
    assert len(browser_failure(PlaywrightTimeout("Page.goto: " + "x" * 900))) == 500
