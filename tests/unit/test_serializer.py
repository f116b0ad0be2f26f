"""Requests cross Redis as JSON only; anything else is refused with a reason."""

from __future__ import annotations

import json
import pickle

import pytest
from scrapy import FormRequest, Request

from crawlhub.frontier.serializer import DecodeError, EncodeError, RequestSerializer
from spiders.scrapeme import ScrapemeSpider
from tests.helpers import make_spider


@pytest.fixture
def codec():
    return RequestSerializer(make_spider(ScrapemeSpider))


def test_round_trip_keeps_everything(codec):
    spider = codec.spider
    request = Request(
        "https://s.example/shop/page/2/?a=1",
        callback=spider.parse,
        method="POST",
        headers={"X-Test": "1"},
        body=b"\x00\xffbinary",
        cookies={"c": "v"},
        meta={"crawlhub_seed_host": "s.example", "depth": 2, "nested": {"k": [1, 2]}},
        priority=7,
        dont_filter=True,
        cb_kwargs={"page": 2},
        flags=["f"],
    )
    back = codec.decode(codec.encode(request))
    assert type(back) is Request
    for attr in ("url", "method", "body", "cookies", "meta", "priority", "dont_filter", "cb_kwargs", "flags"):
        assert getattr(back, attr) == getattr(request, attr), attr
    assert back.headers.get("X-Test") == b"1"
    assert back.callback == spider.parse


def test_plain_get_is_compact(codec):
    payload = codec.encode(Request("https://scrapeme.live/shop/page/12/", meta={"crawlhub_seed_host": "scrapeme.live", "depth": 3}))
    assert json.loads(payload) == {
        "url": "https://scrapeme.live/shop/page/12/",
        "meta": {"crawlhub_seed_host": "scrapeme.live", "depth": 3},
    }
    assert len(payload) < 150


def test_form_request_class_is_allowed(codec):
    back = codec.decode(codec.encode(FormRequest("https://s.example/login", formdata={"u": "x"})))
    assert type(back) is FormRequest and back.body == b"u=x"


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        (pickle.dumps({"url": "https://s.example/"}), "pickle payload refused"),
        (b"\x00\x01garbage", "not JSON"),
        (b"[1, 2]", "expected a JSON object"),
        (b'{"url": "file:///etc/passwd"}', "non-http(s) url"),
        (b'{"meta": {}}', "missing or non-http(s) url"),
        (b'{"url": "https://s.example/", "_class": "os.system"}', "not in FRONTIER_REQUEST_CLASSES"),
        (b'{"url": "https://s.example/", "callback": "__init__"}', "not a public method name"),
        (b'{"url": "https://s.example/", "callback": "close"}', "is not a method of spider"),
        (b'{"url": "https://s.example/", "callback": "no_such"}', "is not a method of spider"),
        (b'{"url": "https://s.example/", "meta": []}', "meta must be a JSON dict"),
        (b'{"url": "https://s.example/", "body": "%%%"}', "body is not base64"),
        (b'{"url": "https://s.example/", "method": 5}', "method must be a JSON str"),
        (b'{"url": "https://s.example/", "priority": "high"}', "priority must be a JSON int"),
        (b'{"url": "https://s.example/", "encoding": "nope"}', "cannot rebuild request"),
        (b"{" + b" " * (1 << 20) + b"}", "over"),
    ],
)
def test_refuses_what_is_not_a_request(codec, payload, reason):
    with pytest.raises(DecodeError) as info:
        codec.decode(payload)
    assert reason in str(info.value)


def test_pickle_is_never_loaded(codec, tmp_path):
    marker = tmp_path / "pwned"

    class Exploit:
        def __reduce__(self):
            return (open, (str(marker), "w"))

    with pytest.raises(DecodeError):
        codec.decode(pickle.dumps(Exploit()))
    assert not marker.exists()


def test_unserializable_meta_is_a_clear_error(codec):
    with pytest.raises(EncodeError, match="cannot be stored as JSON"):
        codec.encode(Request("https://s.example/", meta={"obj": object()}))


class _Base(ScrapemeSpider):
    name = "t_callbacks"

    def parse_item(self, response):  # overridden below: its base version is no callback of the spider
        return None

    @classmethod
    def parse_feed(cls, response):
        return None


class _Callbacks(_Base):
    touched = 0

    @property
    def server(self):  # a property with a side effect (crawlhub's spider connects Redis here)
        type(self).touched += 1
        raise AssertionError("encoding a request must not read the spider's properties")

    def parse_item(self, response):
        return None

    alias = parse_item

    def _private(self, response):
        return None

    @staticmethod
    def helper(response):
        return None


def test_callbacks_are_named_as_scrapy_names_them_without_reading_properties():
    spider = make_spider(_Callbacks)
    codec = RequestSerializer(spider)
    for callback, errback in ((spider.parse_item, spider.parse), (spider.parse_feed, None),
                              (spider.alias, spider.parse_item)):
        request = Request("https://s.example/", callback=callback, errback=errback)
        back = codec.decode(codec.encode(request))
        assert back.callback == callback and back.errback == errback
    assert json.loads(codec.encode(Request("https://s.example/", callback=spider.parse)))["callback"] == "parse"
    # a method of another spider of the same class is run as this spider's (Scrapy's rule too)
    other = make_spider(_Callbacks)
    assert json.loads(codec.encode(Request("https://s.example/", callback=other.parse)))["callback"] == "parse"
    assert _Callbacks.touched == 0


@pytest.mark.parametrize("name, reason", [
    ("base_parse_item", "is not a method of the spider"),  # the base version of an overridden method
    ("helper", "is not a method of the spider"),
    ("lambda", "is not a method of the spider"),
    ("stranger", "is not a method of the spider"),
    ("_private", "'_private' is a private method"),
])
def test_a_callback_no_worker_could_call_is_refused_when_stored(name, reason):
    spider = make_spider(_Callbacks)
    codec = RequestSerializer(spider)
    callback = {
        "base_parse_item": super(_Callbacks, spider).parse_item,
        "helper": spider.helper,
        "lambda": lambda response: None,
        "stranger": RequestSerializer(spider).encode,
        "_private": spider._private,
    }[name]
    with pytest.raises(EncodeError, match="cannot be stored as JSON") as info:
        codec.encode(Request("https://s.example/", callback=callback))
    assert reason in str(info.value)
    with pytest.raises(EncodeError, match="its errback"):
        codec.encode(Request("https://s.example/", errback=callback))


def test_a_crawl_spiders_rule_callbacks_are_the_only_private_names_allowed():
    from scrapy.linkextractors import LinkExtractor
    from scrapy.spiders import CrawlSpider, Rule

    class Rules(CrawlSpider):
        name = "t_rules"
        rules = (Rule(LinkExtractor(), callback="parse_item"),)

        def parse_item(self, response):
            return None

    spider = make_spider(Rules)
    codec = RequestSerializer(spider)
    request = spider._build_request(0, type("Link", (), {"url": "https://s.example/a", "text": "a"})())
    payload = json.loads(codec.encode(request))
    assert (payload["callback"], payload["errback"], payload["meta"]) == ("_callback", "_errback", {"rule": 0, "link_text": "a"})
    back = codec.decode(json.dumps(payload))
    assert back.callback == spider._callback and back.errback == spider._errback
    # the same names on a spider that is no CrawlSpider are private methods like any other
    plain = RequestSerializer(make_spider(_Callbacks))
    with pytest.raises(DecodeError, match="not a public method name"):
        plain.decode(json.dumps(payload))
