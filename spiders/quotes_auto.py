"""quotes.toscrape.com, plain first: a page whose quotes only JavaScript shows is
rendered in headless Chromium, and a domain that keeps needing it is rendered
directly by every worker (docs/browser.md, "Adaptive fallback").

Seed: redis-cli lpush quotes_auto:start_urls https://quotes.toscrape.com/
"""

from spiders.quotes import QuotesSpider


class QuotesAutoSpider(QuotesSpider):
    name = "quotes_auto"
    browser_needs = ("div.quote",)
