"""Scrapy and scrapy-redis habits in a crawlhub project (issue #28): real workers on a local https site with a
redirect. A spider's redis_key, start_urls, a set of seeds, a seeds key of the wrong type, settings crawlhub cannot
honour, bad MongoDB and Redis URLs, a bad revisit duration: each honoured, or refused in one line and exit code 2."""


from __future__ import annotations

from scrapy.settings import Settings

from crawlhub.addon import install
from tests.harness import ROOT


def test_scrapy_redis_settings_are_translated_or_refused():
    settings = Settings({"SCHEDULER": "scrapy_redis.scheduler.Scheduler",
                         "DUPEFILTER_CLASS": "scrapy_redis.dupefilter.RFPDupeFilter",
                         "REDIS_HOST": "redis.internal", "REDIS_PORT": 6380, "REDIS_ENCODING": "latin-1"}, priority="project")
    install(settings, environ={})
    assert settings["SCHEDULER"] == "crawlhub.frontier.scheduler.RedisScheduler"
    assert settings["DUPEFILTER_CLASS"] == "crawlhub.frontier.dupefilter.RedisDupeFilter"
    assert settings["REDIS_URL"] == "redis://redis.internal:6380"
    (refused,) = settings.getlist("CRAWLHUB_REFUSED")
    assert refused.startswith("REDIS_ENCODING = 'latin-1'") and "UTF-8" in refused
    plain = Settings()
    install(plain, environ={})
    assert plain.getlist("CRAWLHUB_REFUSED") == [] and plain["REDIS_URL"] == ""


def test_the_docs_list_every_scrapy_redis_setting_and_attribute_crawlhub_knows():
    from crawlhub.habits import ATTRIBUTES, HONOURED, REFUSED

    page = (ROOT / "docs" / "scrapy-redis.md").read_text()
    section = page.split("# Coming from scrapy-redis", 1)[1].split("\n## ", 1)[0]
    for name in [*HONOURED, *REFUSED, *ATTRIBUTES, "start_urls"]:
        assert f"`{name}`" in section, name
