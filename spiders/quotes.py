"""quotes.toscrape.com: quotes, their authors and tags; follows "Next".

Seed: redis-cli lpush quotes:start_urls https://quotes.toscrape.com/
"""

from crawlhub.spider import CrawlhubSpider
from spiders.items import Quote


class QuotesSpider(CrawlhubSpider):
    name = "quotes"

    def parse(self, response):
        for quote in response.css("div.quote"):
            author_href = quote.css("span a::attr(href)").get()  # none on the /js/ pages: left empty, never the page
            yield Quote(
                text=quote.css("span.text::text").get(),
                author=quote.css("small.author::text").get(),
                author_url=response.urljoin(author_href) if author_href else None,
                tags=quote.css("div.tags a.tag::text").getall(),
                source_url=response.url,
            )
        yield from self.follow_links(response, response.css("li.next a::attr(href)").getall())
