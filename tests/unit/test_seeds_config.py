"""Seed parsing and settings from the environment."""

from __future__ import annotations

import re

import pytest
import scrapy
from scrapy.crawler import Crawler
from scrapy.exceptions import UsageError

from crawlhub.config import SettingError, apply_env_overrides, coerce, redact_url
from crawlhub.seeds import BadSeed, parse_seed, seed_callback
from crawlhub.settings_check import BOUNDS, check_settings
from tests.helpers import settings_with


def test_plain_url_seed():
    seed = parse_seed(b"  https://scrapeme.live/shop/ \n")
    assert seed.url == "https://scrapeme.live/shop/" and seed.dont_filter and seed.priority == 0


def test_json_seed():
    seed = parse_seed('{"url": "https://q.example/", "meta": {"job": 1}, "priority": 5, "method": "post"}')
    assert (seed.url, seed.meta, seed.priority, seed.method) == ("https://q.example/", {"job": 1}, 5, "POST")
    assert parse_seed('{"url": "https://q.example/", "method": "PROPFIND"}').method == "PROPFIND"


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        ("ftp://x.org/", "scheme 'ftp'"),
        ("x.org/shop", "scheme '(none)'"),
        ("https://", "no host"),
        ("http://x.org:99999/", "unparseable URL"),
        ("", "empty URL"),
        (b"\xff\xfe", "not UTF-8"),
        ('{"url": "http://x.org/", "priority": true}', "'priority' must be a JSON int"),
        ('["http://x.org/"]', "must be an object"),
        ('{"url": "http://x.org/", "formdata": {}}', "unknown keys ['formdata']"),
        ('{"url": "http://x.org/", "method": "GET /x HTTP/1.1\\r\\nHost: y"}', "is not an HTTP method"),
        ('{"url": "http://x.org/", "method": ""}', "'method' '' is not an HTTP method"),
        ('{"url": "http://x.org/", "method": "post it"}', "'method' 'POST IT' is not an HTTP method"),
        ('{"url": "http://x.org/", "meta": {"job": 1, "crawlhub_end": {"how": "drop"}, "crawlhub_attempts": 9}}',
         "meta keys ['crawlhub_attempts', 'crawlhub_end'] are crawlhub's own"),
    ],
)
def test_bad_seeds(raw, reason):
    with pytest.raises(BadSeed, match=None) as info:
        parse_seed(raw)
    assert reason in str(info.value)


class _Shop(scrapy.Spider):
    name = "shop"
    listing = "not callable"

    def parse_product(self, response):
        return None

    @staticmethod
    def helper(response):
        return None

    def _private(self, response):
        return None


@pytest.mark.parametrize("owner", [_Shop, _Shop()], ids=["class", "instance"])
def test_a_seeds_callback_is_a_public_method_of_the_spiders_class(owner):
    """What the frontier can store by name and any worker run: a method defined on the spider's class (the crawlhub
    command checks the class before a push, the worker its spider). A static or class method (Scrapy's own
    ``close`` and ``from_crawler``) cannot be stored by name: a seed naming one is refused, not kept in one
    worker's memory."""
    found = seed_callback(owner, "parse_product")
    assert found == owner.parse_product and (isinstance(owner, type) or found.__self__ is owner)
    assert seed_callback(owner, "parse") == owner.parse  # scrapy.Spider's own, inherited
    for name in ("close", "from_crawler", "update_settings", "helper", "listing", "_private", "__init__", "no_such",
                 "parse_product.__call__", ""):
        with pytest.raises(BadSeed, match=f"callback '{re.escape(name)}' is not a method of spider 'shop'"):
            seed_callback(owner, name)
    # what passes can be stored: the request's callback goes into the frontier's JSON by name
    if not isinstance(owner, type):
        request = scrapy.Request("https://s.example/", callback=seed_callback(owner, "parse_product"))
        assert request.to_dict(spider=owner)["callback"] == "parse_product"


def test_seed_size_limit():
    parse_seed("http://x.org/" + "a" * 100, max_bytes=200)
    with pytest.raises(BadSeed, match="over the 200-byte limit"):
        parse_seed("http://x.org/" + "a" * 200, max_bytes=200)


def test_env_overrides_coerce_to_the_default_type():
    ns = {"A_BOOL": False, "AN_INT": 1, "A_FLOAT": 0.5, "A_LIST": ["x"], "A_DICT": {}, "A_STR": "", "lower": 1}
    env = {"A_BOOL": "yes", "AN_INT": "7", "A_FLOAT": "2.5", "A_LIST": "a, b", "A_DICT": '{"k": 1}', "A_STR": "s", "lower": "9"}
    assert sorted(apply_env_overrides(ns, env)) == ["AN_INT", "A_BOOL", "A_DICT", "A_FLOAT", "A_LIST", "A_STR"]
    assert ns == {"A_BOOL": True, "AN_INT": 7, "A_FLOAT": 2.5, "A_LIST": ["a", "b"], "A_DICT": {"k": 1}, "A_STR": "s", "lower": 1}


def test_an_empty_variable_is_an_empty_dict_or_list():
    assert coerce("X", "", {}) == {} and coerce("X", " ", {"a": 1}) == {} and coerce("X", "", ["x"]) == []


@pytest.mark.parametrize(("raw", "default"), [("maybe", False), ("x", 3), ('"s"', {})])
def test_env_override_errors_name_the_variable(raw, default):
    with pytest.raises(SettingError, match="environment variable X="):
        coerce("X", raw, default)




def test_the_defaults_and_the_edges_of_each_range_pass():
    assert check_settings(settings_with()) == []
    edges = {"FRONTIER_PARTITIONS": "1", "LEASE_TTL": "0.001", "RETRY_TIMES": 0, "FRONTIER_LEASE_AHEAD": "-1",
             "DOMAIN_RECOVERY": 1, "QUALITY_PAGE_MIN_SHARE": "0", "BROWSER_MARK_RATIO": 1.0, "METRICS_PORT": 65535,
             "DUPEFILTER_BLOOM_ERROR_RATE": "0.5", "CONCURRENT_REQUESTS": 2.0, "LEASE_MAINTENANCE_INTERVAL": 0.0005}
    assert check_settings(settings_with(**edges)) == []


@pytest.mark.parametrize(("name", "value", "said"), [
    ("FRONTIER_PARTITIONS", "-3", "setting FRONTIER_PARTITIONS = '-3': must be 1 or more"),
    ("FRONTIER_PARTITIONS", 0, "must be 1 or more"),
    ("LEASE_TTL", 0, "LEASE_TTL = 0: must be more than 0"),
    ("CONCURRENT_REQUESTS", "2.5", "must be a whole number"),
    ("CONCURRENT_REQUESTS", "many", "not a number"),
    ("MONGO_BATCH_SIZE", "inf", "must be a whole number"),
    ("RETRY_TIMES", -1, "must be 0 or more"),
    ("FRONTIER_LEASE_AHEAD", -2, "must be -1 or more"),
    ("DUPEFILTER_BLOOM_ERROR_RATE", 1, "must be more than 0 and less than 1"),
    ("DOMAIN_RECOVERY", 0, "must be more than 0 and at most 1"),
    ("QUALITY_PAGE_MIN_SHARE", "1.5", "must be from 0 to 1"),
    ("METRICS_PORT", 70000, "must be from 0 to 65535"),
    ("LEASE_TTL", "nan", "must be more than 0"),
])
def test_a_setting_out_of_its_range_is_named_with_its_value(name, value, said):
    (problem,) = check_settings(settings_with(**{name: value}))
    assert said in problem and problem.startswith(f"setting {name} = ")


def test_a_bad_value_from_the_environment_says_so_and_every_problem_is_listed():
    problems = check_settings(settings_with({"FRONTIER_PARTITIONS": "-3", "LEASE_TTL": "0"}, MONGO_BATCH_SIZE=0))
    assert sorted(problems) == ["environment variable FRONTIER_PARTITIONS=-3: must be 1 or more",
                        "environment variable LEASE_TTL=0.0: must be more than 0",
                        "setting MONGO_BATCH_SIZE = 0: must be 1 or more"]


def test_a_lease_outlives_the_time_between_its_renewals():
    assert check_settings(settings_with(LEASE_TTL=2, LEASE_MAINTENANCE_INTERVAL=1)) == []
    (problem,) = check_settings(settings_with(LEASE_TTL=1.5, LEASE_MAINTENANCE_INTERVAL=1))
    assert problem.startswith("LEASE_TTL (1.5) must be at least twice LEASE_MAINTENANCE_INTERVAL (1)")


def test_every_bounded_setting_is_one_of_crawlhubs():
    from crawlhub import default_settings

    assert [name for name in BOUNDS if not hasattr(default_settings, name)] == []


def test_the_addon_refuses_a_crawler_whose_settings_are_out_of_range():
    class Spider(scrapy.Spider):
        name = "t_bounds"
        custom_settings = {"LEASE_TTL": 0}

    crawler = Crawler(Spider, {"ADDONS": {"crawlhub.Addon": 0}})
    with pytest.raises(UsageError, match="setting LEASE_TTL = 0: must be more than 0"):
        crawler._apply_settings()


def test_redact_url():
    assert redact_url("redis://:s3cret@h:6379/0") == "redis://:***@h:6379/0"
    assert redact_url("mongodb://u:p%40ss@h:27017/db") == "mongodb://u:***@h:27017/db"
    assert redact_url("redis://h:6379/0") == "redis://h:6379/0"
    assert "s3cret" not in redact_url("redis://s3cret@h/0")
