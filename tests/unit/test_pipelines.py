"""Clean, validate and dedupe: pure logic, no servers."""

from __future__ import annotations

from datetime import datetime

import pytest
from scrapy.exceptions import DropItem

from crawlhub.items import Page, mark_page
from crawlhub.pipelines.clean import CleanPipeline, canonical_key_url, clean_text, parse_price
from crawlhub.pipelines.dedupe import DedupePipeline
from crawlhub.pipelines.validate import InvalidItem, ValidatePipeline, problems
from spiders.items import Product, Quote, quote_key
from spiders.scrapeme import ScrapemeSpider
from tests.helpers import make_spider


@pytest.mark.parametrize(
    ("text", "fallback", "expected"),
    [
        ("£63.00", None, ("63.00", "GBP")),
        ("£1,234.5", None, ("1234.50", "GBP")),
        ("12,50 €", None, ("12.50", "EUR")),
        ("$ 9", None, ("9.00", "USD")),
        ("$ 9", "CAD", ("9.00", "CAD")),
        ("USD 10.5", None, ("10.50", "USD")),
        ("63", "gbp", ("63.00", "GBP")),
        ("63", None, ("63.00", None)),
        ("¥500", None, ("500.00", "JPY")),
        ("1.23456", None, ("1.23456", None)),
        ("call us", None, ("call us", None)),
        (None, None, (None, None)),
    ],
)
def test_parse_price(text, fallback, expected):
    assert parse_price(text, fallback) == expected


def test_clean_text():
    assert clean_text("  Bulba\n\t saur  ") == "Bulba saur"
    assert clean_text("   ") is None
    assert clean_text([" a ", "", "b"]) == ["a", "b"]
    assert clean_text(5) == 5


@pytest.fixture
def crawler():
    spider = make_spider(ScrapemeSpider)
    spider.crawler.spider = spider
    return spider.crawler


def test_clean_product(crawler):
    item = Product(
        id=" 759 ", name=" Bulbasaur\n", price="£63.00", url="/shop/Bulbasaur/",
        image_url="../img/1.png", source_url="https://scrapeme.live/shop/page/2/",
    )
    CleanPipeline.from_crawler(crawler).process_item(item)
    assert (item.id, item.name, item.price, item.currency) == ("759", "Bulbasaur", "63.00", "GBP")
    assert item.url == "https://scrapeme.live/shop/Bulbasaur/"
    assert item.image_url == "https://scrapeme.live/shop/page/img/1.png"
    assert item.site == "scrapeme.live"
    assert isinstance(item.scraped_at, datetime) and item.scraped_at.tzinfo is not None


def test_clean_quote_key(crawler):
    item = Quote(text=" “A day” ", author="Steve  Martin", source_url="https://q.example/")
    CleanPipeline.from_crawler(crawler).process_item(item)
    assert item.quote_id == quote_key("“A day”", "Steve Martin")
    assert quote_key("a", "bc") != quote_key("ab", "c")


@pytest.mark.parametrize(("value", "expected"), [
    ("https://Shop.Example/p?b=2&a=1", "https://shop.example/p?a=1&b=2"),  # the fingerprint's form
    ("https://shop.example/p?", "https://shop.example/p"),
    ("https://shop.example/p#reviews", "https://shop.example/p"),  # an in-page anchor: the same document
    ("https://shop.example/p?x=%7e&y=caf\u00e9", "https://shop.example/p?x=~&y=caf%C3%A9"),
    ("https://app.example/#/item/1", "https://app.example/#/item/1"),  # a single-page app's routes: documents
    ("https://app.example/#!item/2", "https://app.example/#!item/2"),
    ("/relative?b=1&a=2", "/relative?b=1&a=2"),  # not an absolute http(s) URL: left as it is
    ("mailto:a@b.example", "mailto:a@b.example"),
    ("759", "759"), (None, None), (759, 759),
    ("http://[::1/p?b=1&a=2", "http://[::1/p?b=1&a=2"),  # not a URL after all: ValidatePipeline says so
])
def test_a_key_url_takes_the_form_the_fingerprint_reads(value, expected):
    assert canonical_key_url(value) == expected


def test_a_url_key_is_stored_canonical_and_other_url_fields_as_found(crawler):
    from crawlhub.items import Page

    page = Page(url="https://Shop.Example/p?b=2&a=1#top", source_url="https://shop.example/p?b=2&a=1", status=200)
    CleanPipeline.from_crawler(crawler).process_item(page)
    assert page.url == "https://shop.example/p?a=1&b=2"  # the key
    assert page.source_url == "https://shop.example/p?b=2&a=1"  # not a key: as the page was fetched
    assert crawler.stats.get_value("items/key_urls_canonical") == 1
    tracked = Page(url="https://shop.example/p;jsessionid=9?utm_source=mail&b=2&gclid=x&a=1", status=200)
    CleanPipeline.from_crawler(crawler).process_item(tracked)
    assert tracked.url == "https://shop.example/p?a=1&b=2"  # the tracking parameters go too (URL_TRACKING_PARAMS)
    item = {"url": "p?b=2&a=1", "source_url": "https://shop.example/list/"}  # a dict item, keyed by url
    CleanPipeline.from_crawler(crawler).process_item(item)
    assert item["url"] == "https://shop.example/list/p?a=1&b=2"
    product = Product(id="7", url="https://shop.example/p?b=2&a=1", source_url="https://shop.example/")
    CleanPipeline.from_crawler(crawler).process_item(product)
    assert product.url == "https://shop.example/p?b=2&a=1"  # keyed by (site, id): its url is a plain field
    crawler.settings.frozen = False
    crawler.settings.set("ITEM_KEY_URLS_CANONICAL", False)
    page = Page(url="https://shop.example/p?b=2&a=1")
    CleanPipeline.from_crawler(crawler).process_item(page)
    assert page.url == "https://shop.example/p?b=2&a=1"


def valid_product(**kw):
    base = {"site": "s.example", "id": "1", "name": "N", "price": "1.00", "currency": "GBP",
                "url": "https://s.example/p/1", "source_url": "https://s.example/shop/"}
    base.update(kw)
    return Product(**base)


def test_validate_accepts_a_complete_product(crawler):
    item = valid_product()
    assert ValidatePipeline.from_crawler(crawler).process_item(item) is item


@pytest.mark.parametrize(
    ("item", "reason"),
    [
        (valid_product(price=None), "missing price"),
        (valid_product(name=""), "missing name"),
        (valid_product(price="call us"), "is not a decimal number"),
        (valid_product(currency="£"), "is not an ISO 4217 code"),
        (valid_product(url="/relative"), "url '/relative' is not an absolute http(s) URL"),
        (valid_product(image_url="javascript:alert(1)"), "image_url"),
        (Quote(text="t", source_url="https://q.example/", quote_id="x"), "missing author"),
        (Page(url="https://p.example/"), "missing status"),
    ],
)
def test_validate_rejects_with_reason(crawler, item, reason):
    with pytest.raises(InvalidItem) as info:
        ValidatePipeline.from_crawler(crawler).process_item(item)
    assert any(reason in r for r in info.value.reasons), info.value.reasons
    assert isinstance(info.value, DropItem)
    assert crawler.stats.get_value("items/invalid") == 1


def test_problems_lists_every_problem():
    assert len(problems(Product())) == 7


def on_page(item, page: int = 1):
    mark_page(item, page)
    return item


def test_dedupe_drops_the_second_copy(crawler):
    dedupe = DedupePipeline.from_crawler(crawler)
    dedupe.process_item(on_page(valid_product()))
    dedupe.process_item(on_page(valid_product(id="2")))
    dedupe.process_item(on_page(valid_product(site="other.example")))
    with pytest.raises(DropItem):
        dedupe.process_item(on_page(valid_product(name="renamed")))
    assert crawler.stats.get_value("items/duplicates_dropped") == 1


def test_dedupe_never_drops_across_pages_or_crawls(crawler):
    """A long-running worker re-crawling a site stores every item again (issue: only 387 of 755 moved)."""
    dedupe = DedupePipeline.from_crawler(crawler)
    for page in range(1, 4):  # the same listing fetched in three crawl rounds, and another page
        assert dedupe.process_item(on_page(valid_product(), page)) is not None
    unmarked = valid_product()
    assert dedupe.process_item(unmarked) is unmarked and dedupe.process_item(valid_product()) is not None
    assert not crawler.stats.get_value("items/duplicates_dropped")


def test_dedupe_memory_is_bounded():
    crawler = make_spider(ScrapemeSpider, DEDUPE_PAGES=10).crawler
    dedupe = DedupePipeline.from_crawler(crawler)
    for page in range(1000):
        dedupe.process_item(on_page(valid_product(id=str(page)), page))
    assert len(dedupe.pages) == 10


def test_a_refused_item_is_named_by_its_type_and_page():
    from crawlhub.items import Page, item_meta

    assert item_meta(Page(url="https://a.test/")).described() == "a pages item (Page)"
    assert item_meta({"url": "https://a.test/"}).described() == "a dict item for collection 'items'"
    assert item_meta({"_collection": "rows"}).described() == "a dict item for collection 'rows'"


def test_an_items_relative_urls_follow_the_pages_base_href():
    """A page that declares <base href>: its items' relative URLs are the base's (as a browser and follow_links read
    them), not the page URL's, once the spider middleware and CleanPipeline have run; a page without one, and an
    absolute or empty value, are left to CleanPipeline as before."""
    from scrapy.http import HtmlResponse, Request

    from crawlhub.spidermiddlewares.base_url import BaseUrlSpiderMiddleware
    from tests.helpers import project_settings

    assert "crawlhub.spidermiddlewares.base_url.BaseUrlSpiderMiddleware" in project_settings()["SPIDER_MIDDLEWARES"]
    spider = make_spider(ScrapemeSpider)
    spider.crawler.spider = spider
    middleware, clean = BaseUrlSpiderMiddleware.from_crawler(spider.crawler), CleanPipeline.from_crawler(spider.crawler)
    url = "https://shop.example/list?page=2"

    def stored(head: str, **fields) -> Product:
        response = HtmlResponse(url=url, body=f"<html><head>{head}</head><body></body></html>".encode(),
                                encoding="utf-8", request=Request(url))
        item = Product(id="1", name="n", price="£1", source_url=url, **fields)
        (out,) = middleware.process_spider_output(response, [item])
        return clean.process_item(out)

    based = stored('<base href="/catalog/">', url=" item-1\n", image_url="img/1.png")
    assert (based.url, based.image_url) == ("https://shop.example/catalog/item-1", "https://shop.example/catalog/img/1.png")
    absolute = stored('<base href="/catalog/">', url="https://cdn.example/p/1", image_url=None)
    assert (absolute.url, absolute.image_url, absolute.source_url) == ("https://cdn.example/p/1", None, url)
    plain = stored("<title>no base</title>", url="item-1", image_url="/img/1.png")
    assert (plain.url, plain.image_url) == ("https://shop.example/item-1", "https://shop.example/img/1.png")
