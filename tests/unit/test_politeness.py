"""The politeness scripts on a real Redis, and the parsing around them."""


from __future__ import annotations

import time

import pytest
from scrapy.settings import Settings

from crawlhub._utils.urls import domain_of
from crawlhub.downloadermiddlewares.robots import ALLOW, ERROR, RULES, Robots
from crawlhub.frontier.politeness import (
    BadLimit,
    Politeness,
    parse_limit,
    parse_rate,
)
from tests.helpers import project_settings


def test_domain_of():
    assert domain_of("http://Example.COM/a") == "example.com"
    assert domain_of("https://example.com:443/a") == "example.com"
    assert domain_of("http://example.com:8080/a") == "example.com:8080"
    assert domain_of("http://user:secret@example.com/a") == "example.com"
    assert domain_of("http://127.0.0.1:5000/") == "127.0.0.1:5000"
    assert domain_of("data:,hello") == "?"
    # an internationalised name: its IDNA form, as Scrapy's request URL has it; `crawlhub limits set` keys it so too
    from crawlhub.cli._common import domain

    assert domain_of("https://BÜCHER.example:8443/a") == "xn--bcher-kva.example:8443"
    assert domain("bücher.example") == domain("http://xn--bcher-kva.example/") == "xn--bcher-kva.example"


def test_parse_rate_and_limits():
    assert parse_rate("5/s") == 5 and parse_rate("30/m") == 0.5 and parse_rate("36/h") == 0.01
    assert parse_rate("2.5") == 2.5 and parse_rate(3) == 3.0
    assert parse_rate("none") == 0 and parse_rate("0") == 0
    for bad in ("5/q", "fast", "-1", "1/s/s"):
        with pytest.raises(BadLimit):
            parse_rate(bad)
    assert parse_limit("2/s") == {"rate": 2.0}
    assert parse_limit({"rate": "1/s", "concurrency": 3}) == {"rate": 1.0, "concurrency": 3}
    with pytest.raises(BadLimit, match="unknown limit field"):
        parse_limit({"rps": 3})
    with pytest.raises(BadLimit, match="DOMAIN_LIMITS"):
        Politeness.from_settings(None, Settings(project_settings(DOMAIN_LIMITS={"a.com": "often"})))


def test_robots_rules():
    rules = Robots(RULES, time.time() + 60, body="User-agent: *\nDisallow: /private/\nCrawl-delay: 2\n")
    assert rules.allowed("http://a.test/shop/", "crawlhub/0.1")
    assert not rules.allowed("http://a.test/private/x", "crawlhub/0.1")
    assert rules.crawl_delay("crawlhub") == 2.0
    assert Robots(ALLOW, 0).allowed("http://a.test/private/x", "bot")
    assert not Robots(ERROR, 0).allowed("http://a.test/", "bot")
    stored = Robots.from_redis({k.encode(): str(v).encode() for k, v in rules.to_redis().items()})
    assert not stored.allowed("http://a.test/private/x", "bot") and stored.state == RULES
