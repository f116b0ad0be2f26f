"""quotes.toscrape.com/js/: the same quotes, filled in by JavaScript; rendered in headless Chromium.

Seed: redis-cli lpush quotes_js:start_urls https://quotes.toscrape.com/js/
Yields the same Quote items as `quotes` does from the plain pages.
"""

from spiders.quotes import QuotesSpider


class QuotesJsSpider(QuotesSpider):
    name = "quotes_js"
    use_browser = True
