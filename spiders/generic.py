"""Any site: one Page per URL (title, meta description, h1, status), following
same-host links up to DEPTH_LIMIT (default 3, from GENERIC_DEPTH_LIMIT).

Seed: redis-cli lpush generic:start_urls https://example.org/
"""

from scrapy.http import TextResponse
from scrapy.settings import SETTINGS_PRIORITIES

from crawlhub.extract import page_title
from crawlhub.items import Page
from crawlhub.spider import CrawlhubSpider


class GenericSpider(CrawlhubSpider):
    name = "generic"

    @classmethod
    def crawlhub_settings(cls, settings):
        super().crawlhub_settings(settings)
        explicit = "DEPTH_LIMIT" in settings.getlist("CRAWLHUB_ENV_OVERRIDES") or (
            settings.getpriority("DEPTH_LIMIT") >= SETTINGS_PRIORITIES["cmdline"]
        )
        if not explicit:
            settings.set("DEPTH_LIMIT", settings.getint("GENERIC_DEPTH_LIMIT"), priority="spider")

    def parse(self, response):
        if not isinstance(response, TextResponse):
            yield Page(url=response.url, status=response.status, source_url=response.url)
            return
        yield Page(
            url=response.url,
            title=page_title(response),  # the document's, never an inline SVG icon's
            description=response.css('meta[name="description" i]::attr(content)').get(),
            h1=response.css("h1").xpath("string()").get(),
            status=response.status,
            source_url=response.url,
        )
        yield from self.follow_links(response, response.css("a::attr(href)").getall())
