"""Spiders that exist only for the tests (SPIDER_MODULES=spiders,tests.sites.spiders)."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import ClassVar

from scrapy.exceptions import IgnoreRequest
from scrapy.linkextractors import LinkExtractor
from scrapy.spiders import Rule
from scrapy_redis.spiders import RedisCrawlSpider, RedisSpider

from crawlhub.items import Page
from crawlhub.spider import CrawlhubSpider
from spiders.quotes import QuotesSpider
from spiders.scrapeme import ScrapemeSpider


class LambdaSpider(CrawlhubSpider):
    """Follows every link with a lambda callback: requests that cannot be JSON."""

    name = "t_lambda"

    def parse(self, response):
        """Contracts must run (`scrapy check`).

        @url http://127.0.0.1:1/
        @returns items 1 1
        """
        yield self.page(response)
        for href in response.css("a::attr(href)").getall():
            yield response.follow(href, callback=lambda r: self.parse_page(r))

    def parse_page(self, response):
        yield self.page(response)

    def page(self, response):
        return Page(url=response.url, title=response.css("title::text").get(), status=response.status,
                    source_url=response.url)


class PlainRedisSpider(RedisSpider):
    """An unmodified scrapy-redis RedisSpider: it runs on crawlhub's frontier as it is."""

    name = "t_plain_redis"

    def parse(self, response):
        yield Page(url=response.url, title=response.css("title::text").get(), status=response.status,
                   source_url=response.url)
        for href in response.css("a::attr(href)").getall():
            yield response.follow(href, callback=self.parse)


class PlainRedisCrawlSpider(RedisCrawlSpider):
    """An unmodified scrapy-redis RedisCrawlSpider: its rules' requests (callback CrawlSpider._callback,
    the rule's index in meta) cross Redis like any other."""

    name = "t_plain_redis_crawl"
    rules = (
        Rule(LinkExtractor(allow=r"/list/"), follow=True),
        Rule(LinkExtractor(allow=r"/item/"), callback="parse_item"),
    )

    def parse_item(self, response):
        yield Page(url=response.url, title=response.css("title::text").get(), status=response.status,
                   source_url=response.url)


@dataclass
class Book:
    """An item type of a project's own (not in crawlhub/items.py): its rules are its declarations."""

    collection: ClassVar[str] = "books"
    key_fields: ClassVar[tuple[str, ...]] = ("shop", "isbn")
    required: ClassVar[tuple[str, ...]] = ("shop", "isbn", "title", "price", "currency", "url")
    url_fields: ClassVar[tuple[str, ...]] = ("url", "cover")
    price_fields: ClassVar[dict[str, str]] = {"price": "currency"}
    host_fields: ClassVar[tuple[str, ...]] = ("shop",)
    derived_keys: ClassVar[dict[str, tuple[str, ...]]] = {"slug": ("title", "isbn")}

    isbn: str | None = None
    title: str | None = None
    price: str | None = None
    currency: str | None = None
    url: str | None = None
    cover: str | None = None
    shop: str | None = None
    slug: str | None = None
    source_url: str | None = None


class BookSpider(CrawlhubSpider):
    """Books listed as <li data-isbn> with a title, a price and a cover; follows "next"."""

    name = "t_books"
    currency = "GBP"

    def parse(self, response):
        for li in response.css("li[data-isbn]"):
            yield Book(isbn=li.attrib["data-isbn"], title=li.css("h3::text").get(), price=li.css(".price::text").get(),
                       url=li.css("a::attr(href)").get(), cover=li.css("img::attr(src)").get(), source_url=response.url)
        yield from self.follow_links(response, response.css("a.next::attr(href)").getall())


class ShopRevisitSpider(ScrapemeSpider):
    """The shop spider, revisiting every listing page (short intervals: a test's)."""

    name = "t_revisit"
    revisit = "4s"
    revisit_min = "3.5s"
    revisit_max = "4.5s"


class SitemapShopSpider(CrawlhubSpider):
    """Products found through robots.txt -> a sitemap index -> gzipped sitemaps; re-read every 2 s."""

    name = "t_sitemap"
    sitemap_rules = ((r"/product/", "parse_product"),)
    sitemap_revisit = "2s"
    revisit_rules = {r"/product/": "1h"}
    revisit_min = "1s"

    def parse_product(self, response):
        yield Page(url=response.url, title=response.css("title::text").get(), status=response.status,
                   source_url=response.url)


class PagesRevisitSpider(CrawlhubSpider):
    """Every page of a site, revisited every 6 s (a test's: the refresher killed mid-batch)."""

    name = "t_revisit_pages"
    revisit = "6s"
    revisit_min = "1s"

    def parse(self, response):
        yield Page(url=response.url, title=response.css("title::text").get(), status=response.status,
                   source_url=response.url)
        yield from self.follow_links(response, response.css("a::attr(href)").getall())


class DetailRevisitSpider(CrawlhubSpider):
    """A listing whose items are on detail pages, read by a callback of their own, as a shop's product pages are;
    every page revisited every 3 s (a test's: the redirects a site adds between two visits)."""

    name = "t_revisit_detail"
    revisit = "3s"
    revisit_min = "1s"
    revisit_max = "6s"

    def parse(self, response):
        yield from self.follow_links(response, response.css("a.item::attr(href)").getall(), callback=self.parse_item)

    def parse_item(self, response):
        title = response.css("h1.product::text").get()
        if title:  # a detail page: a spider yields what it recognises (a listing has no h1.product)
            yield Page(url=response.url, title=title, status=response.status, source_url=response.url)


class HostileSpider(CrawlhubSpider):
    """Every way a page can leave Scrapy without reaching a generator callback that ends well: a callback
    that raises before yielding (``json.loads`` of an HTML page), a seed whose cb_kwargs the callback does
    not take, error statuses Scrapy ignores, a corrupt gzip body (raised in HttpCompressionMiddleware's
    process_response) and a user middleware's IgnoreRequest in process_response (``/ignored``)."""

    name = "t_hostile"
    custom_settings = {"DOWNLOADER_MIDDLEWARES": {"tests.sites.spiders.IgnoringMiddleware": 600}}

    def parse(self, response):
        if "/api" in response.url:
            return self.parse_api(response)
        items = [Page(url=response.url, title=response.css("title::text").get(), status=response.status,
                      source_url=response.url)]
        return items + list(self.follow_links(response, response.css("a::attr(href)").getall()))

    def parse_api(self, response):
        return [json.loads(response.text)]  # an HTML page where JSON was expected: raises, not a generator

    def parse_with(self, response, page):
        yield Page(url=response.url, title=str(page), status=response.status, source_url=response.url)


class IgnoringMiddleware:
    """A project's downloader middleware that drops ``/ignored`` in process_response."""

    def process_response(self, request, response, spider=None):
        if request.url.endswith("/ignored"):
            raise IgnoreRequest("this project does not want /ignored")
        return response


class HabitSpider(CrawlhubSpider):
    """scrapy-redis habits: its own seeds key (``redis_key``), its own batch size and idle time, and
    ``start_urls`` (from T_START_URLS, the test site's address) that seed the shared frontier once per crawl."""

    name = "t_habit"
    redis_key = "%(name)s:custom_seeds"
    redis_batch_size = 3
    max_idle_time = 2
    start_urls = os.environ.get("T_START_URLS", "").split()

    def parse(self, response):
        yield Page(url=response.url, title=response.css("title::text").get(), status=response.status,
                   source_url=response.url)
        for href in response.css("a::attr(href)").getall():
            yield response.follow(href, callback=self.parse)


class BadRevisitSpider(CrawlhubSpider):
    """A revisit interval that is not a duration: the worker must not start."""

    name = "t_bad_revisit"
    revisit = "2x"

    def parse(self, response):
        yield Page(url=response.url, status=response.status, source_url=response.url)


class CatalogSpider(CrawlhubSpider):
    """A Page per list and item page of tests.sites.members' catalogs, following the lists' links."""

    def parse(self, response):
        yield Page(url=response.url, title=response.css("title::text").get(), status=response.status,
                   h1=response.css("p.user::text").get(), source_url=response.url)
        for href in response.css("a::attr(href)").getall():
            if href.startswith(("/list/", "/item/")):
                yield response.follow(href, callback=self.parse)


class VisitorsSpider(CatalogSpider):
    """A session starts by visiting the home page, which hands out the cookie every other page demands."""

    name = "t_visitors"

    async def login(self, session):
        await session.get(os.environ["VISITORS_HOME"])


class MembersSpider(CatalogSpider):
    """Logs in with a form (its CSRF token in a hidden field); the site ends sessions by sending to the form."""

    name = "t_members"

    async def login(self, session):
        form = await session.get(os.environ["MEMBERS_LOGIN_URL"])
        page = await session.submit(form, formdata={"user": os.environ["MEMBERS_USER"],
                                                    "password": os.environ["MEMBERS_PASSWORD"]})
        return "Log out" in page.text

    def session_expired(self, response):
        return "/login" in response.url and "the members' page sent us to the login form"


class RolesSpider(QuotesSpider):
    """Quotes from an index of pages, some of which show their quotes only with JavaScript: a page with neither
    quotes nor the index's list goes to the browser (browser_needs)."""

    name = "t_roles"
    browser_needs = ("div.quote", "ul.pages")

    def parse(self, response):
        yield from super().parse(response)
        yield from self.follow_links(response, response.css("ul.pages a::attr(href)").getall())
