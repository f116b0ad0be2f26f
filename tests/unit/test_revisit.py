"""Continuous crawling's parts on their own: durations, the revisit policy, the status store, the refresher's exactly-once."""


from __future__ import annotations

import json

import pytest
from scrapy.settings import Settings

from crawlhub.revisit.policy import BadDuration, RevisitPolicy, parse_duration
from crawlhub.revisit.store import StatusUpdate
from tests.helpers import project_settings


def settings(**overrides) -> Settings:
    return Settings(project_settings(**overrides))


class Declares:
    name = "shop"

    def __init__(self, **attrs):
        vars(self).update(attrs)


@pytest.mark.parametrize(("text", "seconds"), [(90, 90), ("90s", 90), ("15m", 900), ("6h", 21600), ("1d", 86400),
                                               ("2w", 1209600), ("4.5s", 4.5), (" 2 days ", 172800)])
def test_durations(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("bad", ["soon", "-1h", "0", True, "6 parsecs"])
def test_bad_durations_say_how_to_write_one(bad):
    with pytest.raises(BadDuration, match="bad duration"):
        parse_duration(bad)


def test_a_spider_that_declares_nothing_is_one_shot():
    policy = RevisitPolicy.for_spider(Declares(), settings())
    assert not policy.enabled and policy.interval_for("https://shop.test/p/1") is None


def test_rules_first_match_wins_and_meta_overrides():
    policy = RevisitPolicy.for_spider(Declares(revisit="1d", revisit_rules={r"/shop/page/": "6h", r"/shop/": "12h"}),
                                      settings())
    assert policy.interval_for("https://s.test/shop/page/2/") == 6 * 3600
    assert policy.interval_for("https://s.test/shop/") == 12 * 3600
    assert policy.interval_for("https://s.test/about") == 86400
    assert policy.interval_for("https://s.test/shop/", {"revisit": "2h"}) == 7200
    assert policy.interval_for("https://s.test/shop/", {"revisit": False}) is None


def test_the_schedule_adapts_within_its_bounds():
    policy = RevisitPolicy.for_spider(Declares(revisit="1h", revisit_min="30m", revisit_max="2h"), settings())
    assert policy.adapt(3600, changed=False) == 3600 * 1.2
    assert policy.adapt(3600, changed=True) == 3600 * 0.8
    assert policy.adapt(3600, changed=None) == 3600
    interval = 3600.0
    for _ in range(10):
        interval = policy.adapt(interval, changed=False)
    assert interval == 7200, "capped at the maximum"
    for _ in range(10):
        interval = policy.adapt(interval, changed=True)
    assert interval == 1800, "raised to the minimum"
    assert policy.interval_for("https://s.test/", {"revisit": "1m"}) == 1800, "a declared interval is bounded too"


def test_a_bad_declaration_names_the_spider_and_the_attribute():
    with pytest.raises(BadDuration, match=r"spider shop: revisit_rules\['/p/'\]: bad duration"):
        RevisitPolicy.for_spider(Declares(revisit_rules={"/p/": "often"}), settings())
    with pytest.raises(BadDuration, match="revisit_min .* is more than revisit_max"):
        RevisitPolicy.for_spider(Declares(revisit="1h", revisit_min="2h", revisit_max="1h"), settings())


def test_the_gone_delay_is_a_duration_from_the_spider_or_the_setting_and_0_is_none():
    assert RevisitPolicy.for_spider(Declares(revisit="1h"), settings()).gone_delay == 0, "by default: marked at once"
    assert RevisitPolicy.for_spider(Declares(revisit="1h"), settings(REVISIT_GONE_DELAY=90)).gone_delay == 90
    assert RevisitPolicy.for_spider(Declares(revisit="1h"), settings(REVISIT_GONE_DELAY="10m")).gone_delay == 600
    spider = Declares(revisit="1h", revisit_gone_delay="2h")
    assert RevisitPolicy.for_spider(spider, settings(REVISIT_GONE_DELAY=90)).gone_delay == 7200, "the spider's wins"
    assert RevisitPolicy.for_spider(Declares(revisit="1h", revisit_gone_delay=0), settings(REVISIT_GONE_DELAY=90)
                                    ).gone_delay == 0
    with pytest.raises(BadDuration, match=r"spider shop: revisit_gone_delay: bad duration 'soon'.*or 0"):
        RevisitPolicy.for_spider(Declares(revisit="1h", revisit_gone_delay="soon"), settings())
    with pytest.raises(BadDuration, match=r"spider shop: REVISIT_GONE_DELAY: bad duration -5"):
        RevisitPolicy.for_spider(Declares(revisit="1h"), settings(REVISIT_GONE_DELAY=-5))


def update(url: str, status: int = 200, signature: str = "s1", changed=None, at: float = 1000.0) -> StatusUpdate:
    return StatusUpdate(spider="shop", fp=url[-2:], url=url, domain="s.test", request=json.dumps({"url": url}),
                        fetched_at=at, status=status, etag='"e1"' if status != 304 else '"ignored"',
                        last_modified=None, signature=signature if status != 304 else None, interval=60.0,
                        changed=changed)


@pytest.mark.parametrize(("text", "expected"), [("2026-11-23", 1795392000.0), ("2026-11-23T10:00:00Z", 1795428000.0),
                                                ("2026-11-23T12:00:00+02:00", 1795428000.0), ("yesterday", None),
                                                ("", None)])
def test_sitemap_lastmods(text, expected):
    from crawlhub.revisit.sitemaps import parse_lastmod

    assert parse_lastmod(text) == expected


def test_a_sitemap_seed_and_its_mistakes():
    from crawlhub.seeds import BadSeed, parse_seed

    seed = parse_seed('{"sitemap": "https://shop.test/robots.txt", "priority": 3}')
    assert (seed.url, seed.sitemap, seed.priority) == ("https://shop.test/robots.txt", True, 3)
    with pytest.raises(BadSeed, match="both 'url' and 'sitemap'"):
        parse_seed('{"url": "https://shop.test/", "sitemap": "https://shop.test/robots.txt"}')
    with pytest.raises(BadSeed, match="scheme 'ftp'"):
        parse_seed('{"sitemap": "ftp://shop.test/sitemap.xml"}')


def test_a_redirected_page_keeps_its_record_and_a_page_answering_again_loses_the_mark():
    from crawlhub.revisit.store import Redirected

    op = Redirected("shop", "ab", "https://s.test/p/1", "https://s.test/", 301, 1000.0, 86400.0).operation()
    assert op._filter == {"_id": "shop:ab"} and not op._upsert  # a record a reset deleted meanwhile stays gone
    assert op._doc["$set"] == {"redirected_to": "https://s.test/", "last_fetch": 1000.0, "last_status": 301,
                               "interval": 86400.0, "next_fetch": 87400.0}
    assert set(op._doc["$unset"]) == {"etag", "last_modified", "signature"}  # the old body's: a whole GET next
    assert op._doc["$inc"] == {"fetches": 1, "changes": 1}
    assert "url" not in op._doc["$set"] and "request" not in op._doc["$set"]  # it still asks its own address
    again = update("https://s.test/p/1").operation()._doc
    assert "redirected_to" in again["$unset"]
    for_now = Redirected("shop", "ab", "https://s.test/p/1", "https://s.test/", 302, 1000.0, 60.0, permanent=False)
    doc = for_now.operation()._doc  # a temporary redirect: the page's validators stand, nothing changed
    assert "$unset" not in doc and doc["$inc"] == {"fetches": 1} and doc["$set"]["next_fetch"] == 1060.0


def test_a_redirects_target_written_through_another_pages_revisit_keeps_its_own_request():
    op = update("https://s.test/").operation()._doc
    assert op["$set"]["request"] == '{"url": "https://s.test/"}' and op["$setOnInsert"] == {"first_fetch": 1000.0}
    target = update("https://s.test/")
    target.keep_request = True
    op = target.operation()._doc
    assert not {"url", "domain", "request"} & set(op["$set"])  # a record there keeps them: its own callback
    assert op["$setOnInsert"] == {"first_fetch": 1000.0, "url": "https://s.test/", "domain": "s.test",
                                  "request": '{"url": "https://s.test/"}'}
