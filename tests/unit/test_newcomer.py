"""What a newcomer's first worker says and needs (#67): no internet for cookies, the seeding line, the warning of
Scrapy's own throttles, a spider hook's error named as the spider's."""

from __future__ import annotations

import logging

import pytest
from scrapy import Spider
from scrapy.http import Headers, HtmlResponse, Request
from scrapy.settings import Settings
from scrapy.utils.test import get_crawler

from crawlhub._utils.hooks import SpiderHookError, call_hook
from crawlhub.connection import seed_commands
from crawlhub.downloadermiddlewares.cookies import OfflineCookiesMiddleware, is_public_domain, suffix_list
from crawlhub.downloadermiddlewares.politeness import worker_throttles
from tests.helpers import project_settings


def test_public_suffixes_are_known_without_the_internet():
    """(Sockets are refused here: a fetch of the Public Suffix List would fail the test.)"""
    suffix_list.cache_clear()
    assert suffix_list().suffix_list_urls == (), "the snapshot tldextract ships, not a fetch (nor a cached fetch)"
    assert is_public_domain("co.uk") and is_public_domain("github.io"), "a private suffix too, as Scrapy's"
    assert not is_public_domain("example.co.uk") and not is_public_domain("shop.example.com")


def test_the_cookie_middleware_refuses_a_cookie_for_a_public_suffix_and_keeps_the_sites():
    crawler = get_crawler(Spider, settings_dict=project_settings())
    middleware = OfflineCookiesMiddleware.from_crawler(crawler)
    request = Request("https://shop.example.co.uk/a")
    headers = Headers([("Set-Cookie", "bad=1; Domain=co.uk; Path=/"), ("Set-Cookie", "good=1; Domain=example.co.uk")])
    middleware.process_response(request, HtmlResponse(request.url, headers=headers, request=request))
    following = Request("https://shop.example.co.uk/b")
    middleware.process_request(following)
    assert following.headers.get("Cookie") == b"good=1"
    elsewhere = Request("https://other.co.uk/")
    middleware.process_request(elsewhere)
    assert elsewhere.headers.get("Cookie") is None, "a cookie for co.uk would reach every site under it"


def cmdline(**values) -> Settings:
    settings = Settings(project_settings())
    settings.setdict(values, priority="cmdline")
    return settings


def test_the_seeding_line_reaches_the_workers_own_redis():
    project = Settings(project_settings(REDIS_URL="redis://127.0.0.1:6390/0"))
    assert seed_commands(project, "shop", "shop:start_urls") == (
        "crawlhub seed shop URL (or: redis-cli -p 6390 lpush shop:start_urls URL)")
    remote = cmdline(REDIS_URL="redis://:s3cret@redis.internal:6379/2")
    line = seed_commands(remote, "shop", "shop:urls")
    assert line == ("REDIS_URL=redis://:***@redis.internal:6379/2 crawlhub seed shop URL "
                    "(or: redis-cli -h redis.internal -n 2 --askpass lpush shop:urls URL)"), line
    cluster = Settings(project_settings(REDIS_URL="redis+cluster://10.0.0.1:7000,10.0.0.2:7000"))
    assert seed_commands(cluster, "shop", "{shop}:start_urls").endswith(
        "(or: redis-cli -c -h 10.0.0.1 -p 7000 lpush {shop}:start_urls URL)")


def test_scrapys_throttles_above_crawlhubs_defaults_are_named_with_their_effect():
    assert worker_throttles(Settings(project_settings())) == [], "crawlhub's own defaults: nothing to say"
    settings = Settings(project_settings())
    settings.setdict({"DOWNLOAD_DELAY": 1, "CONCURRENT_REQUESTS_PER_DOMAIN": 1}, priority="project")
    settings.set("AUTOTHROTTLE_ENABLED", True, priority="spider")
    said = worker_throttles(settings)
    assert [s.split(" (")[0] for s in said] == ["DOWNLOAD_DELAY = 1", "CONCURRENT_REQUESTS_PER_DOMAIN = 1",
                                               "AUTOTHROTTLE_ENABLED = True"]
    assert "from settings.py or the environment" in said[0] and "from the spider's custom_settings" in said[2]
    assert "1 request(s) a second per worker and domain" in said[0]
    faster = cmdline(DOWNLOAD_DELAY=0, CONCURRENT_REQUESTS_PER_DOMAIN=32)
    assert worker_throttles(faster) == [], "what does not slow a worker down is not a warning"


class QuotesSpider(Spider):
    name = "quotes"

    def session_expired(self, response):
        return response.css("form#login")


def test_a_hooks_error_is_the_spiders_named_with_its_hook(caplog):
    spider = QuotesSpider()
    from scrapy.http import Response

    redirect = Response("https://quotes.example/page/2", status=302, headers={"Location": "/login"})
    with caplog.at_level(logging.ERROR), pytest.raises(SpiderHookError) as raised:
        call_hook(spider, "session_expired", redirect, url=redirect.url)
    assert str(raised.value) == ("spider hook QuotesSpider.session_expired raised NotSupported: Response content "
                                 "isn't text")
    (record,) = caplog.records
    assert record.getMessage() == ("Spider error in QuotesSpider.session_expired processing "
                                   "https://quotes.example/page/2") and record.exc_info is not None
