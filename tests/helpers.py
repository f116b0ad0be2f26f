"""Unit-test helpers: spiders and responses without any server."""

from __future__ import annotations

from pathlib import Path

from scrapy.http import HtmlResponse, Request
from scrapy.settings import Settings
from scrapy.utils.test import get_crawler

FIXTURES = Path(__file__).parent / "fixtures"


def project_settings(**overrides) -> dict:
    """crawlhub's project settings and its defaults (what the add-on installs) as a dict, with overrides."""
    from crawlhub import default_settings, settings

    values = {name: getattr(module, name) for module in (default_settings, settings) for name in dir(module)
              if name.isupper()}
    values.update(overrides)
    return values


def make_spider(spidercls, **settings):
    crawler = get_crawler(spidercls, settings_dict=project_settings(**settings))
    return spidercls.from_crawler(crawler)


def fixture_response(name: str, url: str, meta: dict | None = None) -> HtmlResponse:
    request = Request(url, meta=meta or {})
    return HtmlResponse(url=url, body=(FIXTURES / name).read_bytes(), encoding="utf-8", request=request)


def run_pipelines(crawler, item, *pipeline_classes):
    for cls in pipeline_classes:
        item = cls.from_crawler(crawler).process_item(item)
    return item


def settings_with(environ: dict[str, str] | None = None, **values) -> Settings:
    """crawlhub's settings with ``environ`` as the environment, then ``values`` as given with ``-s``."""
    from crawlhub.addon import install

    settings = Settings()
    install(settings, environ or {})
    for name, value in values.items():
        settings.set(name, value, "cmdline")
    return settings
