"""scrapeme.live/shop: a WooCommerce (Storefront) shop.

Seed: redis-cli lpush scrapeme:start_urls https://scrapeme.live/shop/
Reads the listing pages only (li.product) and follows pagination.
"""

from crawlhub.extract import image_url
from crawlhub.spider import CrawlhubSpider
from spiders.items import Product


class ScrapemeSpider(CrawlhubSpider):
    name = "scrapeme"

    def parse(self, response):
        for product in response.css("ul.products li.product"):
            # a sale shows <del>old</del> <ins>new</ins>: the price is the new one
            price = product.css(".price ins .amount") or product.css(".price .amount")
            yield Product(
                # the add-to-cart button's; a shop in catalogue mode shows none: the same WordPress post id
                # is in the item's class (post-775)
                id=product.css("a[data-product_id]::attr(data-product_id)").get()
                or product.xpath("@class").re_first(r"(?:^|\s)post-(\d+)(?:\s|$)"),
                # WooCommerce's title class, whatever the theme makes its tag (h2, h3) or puts in it (a link)
                name=(product.css(".woocommerce-loop-product__title") or product.css("h2, h3"))[:1].xpath("string()").get(),
                price=price[:1].xpath("string()").get(),
                url=product.css("a.woocommerce-LoopProduct-link::attr(href), a::attr(href)").get(),
                image_url=image_url(product),  # a lazy-loading theme keeps it in data-src & co.
                source_url=response.url,
            )
        pages = response.css(".woocommerce-pagination a.page-numbers::attr(href)").getall()
        yield from self.follow_links(response, pages)
