"""Spiders that exist only for the tests (SPIDER_MODULES=spiders,tests.sites.spiders)."""

from __future__ import annotations

from scrapy_redis.spiders import RedisSpider

from crawlhub.items import Page
from crawlhub.spider import CrawlhubSpider


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
