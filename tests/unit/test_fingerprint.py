"""crawlhub's request fingerprint: Scrapy's, the URL read without the parameters that only track a visit."""

from __future__ import annotations

import pytest
from scrapy import Request
from scrapy.utils.request import fingerprint
from scrapy.utils.test import get_crawler

from crawlhub._utils.urls import IgnoredParams
from crawlhub.addon import Addon
from crawlhub.fingerprint import RequestFingerprinter


@pytest.mark.parametrize(("url", "expected"), [
    ("https://s.example/p?a=1&utm_source=mail&UTM_Medium=x", "https://s.example/p?a=1"),
    ("https://s.example/p?utm_source=mail", "https://s.example/p"),
    ("https://s.example/p?utm%5Fcampaign=x&b=2", "https://s.example/p?b=2"),  # a name escaped is the name
    ("https://s.example/p?fbclid=IwAR0&gclid=1&page=2", "https://s.example/p?page=2"),
    ("https://s.example/cart;jsessionid=0A1B?item=3", "https://s.example/cart?item=3"),  # a servlet's session
    ("https://s.example/p?PHPSESSID=abc", "https://s.example/p"),
    ("https://s.example/p?utm=1&source=2&a_utm_b=3", "https://s.example/p?utm=1&source=2&a_utm_b=3"),  # not tracking
    ("https://s.example/p?b=2&a=1", "https://s.example/p?b=2&a=1"),  # the rest as it was: the order too
    ("https://s.example/p;v=1", "https://s.example/p;v=1"),
    ("https://s.example/p", "https://s.example/p"),
])
def test_tracking_parameters_are_left_out(url, expected):
    from crawlhub.default_settings import URL_TRACKING_PARAMS

    assert IgnoredParams(URL_TRACKING_PARAMS).strip_url(url) == expected


def test_no_patterns_leave_every_url_alone():
    assert not IgnoredParams([])
    assert IgnoredParams(["", " "]).strip_url("https://s/p?utm_source=x") == "https://s/p?utm_source=x"


def test_a_link_with_tracking_parameters_is_the_page_without_them():
    crawler = get_crawler(settings_dict={"ADDONS": {Addon: 0}})
    crawler._apply_settings()
    fingerprinter = crawler.request_fingerprinter
    assert isinstance(fingerprinter, RequestFingerprinter)  # the addon's default
    page = Request("https://s.example/p?b=2&a=1")
    tracked = Request("https://s.example/p?a=1&utm_source=mail&b=2&fbclid=x")
    assert fingerprinter.fingerprint(tracked) == fingerprinter.fingerprint(page) == fingerprint(page)
    assert tracked.url == "https://s.example/p?a=1&utm_source=mail&b=2&fbclid=x"  # fetched as linked
    assert fingerprinter.fingerprint(Request("https://s.example/p?a=2")) != fingerprinter.fingerprint(page)
    verbatim = Request(tracked.url, meta={"verbatim_url": True})
    assert fingerprinter.fingerprint(verbatim) == fingerprint(verbatim) != fingerprint(page)
    post = Request(tracked.url, method="POST", body=b"q=1")
    assert fingerprinter.fingerprint(post) == fingerprint(post.replace(url=page.url)) != fingerprinter.fingerprint(page)


def test_the_parameters_are_a_setting_and_a_projects_fingerprinter_wins():
    crawler = get_crawler(settings_dict={"ADDONS": {Addon: 0}, "URL_TRACKING_PARAMS": ["ref"]})
    crawler._apply_settings()
    fp = crawler.request_fingerprinter.fingerprint
    assert fp(Request("https://s.example/p?ref=home")) == fp(Request("https://s.example/p"))
    assert fp(Request("https://s.example/p?utm_source=x")) != fp(Request("https://s.example/p"))
    own = get_crawler(settings_dict={"ADDONS": {Addon: 0},
                                     "REQUEST_FINGERPRINTER_CLASS": "scrapy.utils.request.RequestFingerprinter"})
    own._apply_settings()
    assert not isinstance(own.request_fingerprinter, RequestFingerprinter)
