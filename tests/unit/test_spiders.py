"""Selectors of the bundled spiders on fixture pages with the sites' real markup."""

from __future__ import annotations

import re
import time

import pytest
from parsel import Selector
from scrapy import Request
from scrapy.http import HtmlResponse

from crawlhub.extract import image_url
from crawlhub.items import Page
from crawlhub.pipelines.clean import CleanPipeline
from crawlhub.pipelines.validate import field_problems
from crawlhub.spider import SEED_HOST
from spiders.generic import GenericSpider
from spiders.items import Product, Quote
from spiders.quotes import QuotesSpider
from spiders.scrapeme import ScrapemeSpider
from tests.helpers import FIXTURES, fixture_response, make_spider


def split(results):
    items = [r for r in results if not isinstance(r, Request)]
    requests = [r for r in results if isinstance(r, Request)]
    return items, requests


def test_scrapeme_listing_page():
    spider = make_spider(ScrapemeSpider)
    response = fixture_response("scrapeme_shop_page2.html", "https://scrapeme.live/shop/page/2/")
    items, requests = split(list(spider.parse(response)))

    assert [type(i) for i in items] == [Product] * 4
    first = items[0]
    assert (first.id, first.name, first.price) == ("775", "Butterfree", "£162.00")
    assert first.url == "https://scrapeme.live/shop/Butterfree/"
    assert first.image_url == "https://scrapeme.live/wp-content/uploads/2018/08/012-350x350.png"
    assert first.source_url == "https://scrapeme.live/shop/page/2/"
    assert items[1].price == "£1,025.00"
    assert items[2].price == "£99.50", "a sale price is the <ins> one"
    assert items[3].price is None, "out of stock: no price shown"

    urls = {r.url for r in requests}
    assert urls == {f"https://scrapeme.live/shop/page/{n}/" for n in (1, 3, 4, 47, 48)}
    assert all(r.meta[SEED_HOST] == "scrapeme.live" for r in requests)


def test_scrapeme_items_after_cleaning():
    spider = make_spider(ScrapemeSpider)
    response = fixture_response("scrapeme_shop_page2.html", "https://scrapeme.live/shop/page/2/")
    clean = CleanPipeline.from_crawler(spider.crawler)
    spider.crawler.spider = spider
    items = [clean.process_item(i) for i in split(list(spider.parse(response)))[0]]
    assert [(i.name, i.price, i.currency, i.site) for i in items[:3]] == [
        ("Butterfree", "162.00", "GBP", "scrapeme.live"),
        ("Weedle", "1025.00", "GBP", "scrapeme.live"),
        ("Kakuna", "99.50", "GBP", "scrapeme.live"),
    ]


# how lazy-loading plugins and themes rewrite a WooCommerce listing's <img src="URL" ...>: a placeholder in src,
# the image elsewhere (the browser's script swaps it in)
SVG = "data:image/svg+xml,%3Csvg%20xmlns='http://www.w3.org/2000/svg'%20viewBox='0%200%20324%20324'%3E%3C/svg%3E"
GIF = "data:image/gif;base64,R0lGODlhAQABAAAAACH5BAEKAAEALAAAAAABAAEAAAICTAEAOw=="
LAZY_THEMES = {
    "wp-rocket": lambda m: f'<img src="{SVG}" data-lazy-src="{m[1]}"{m[2]}><noscript><img src="{m[1]}"{m[2]}></noscript>',
    "lazysizes": lambda m: f'<img src="{GIF}" data-src="{m[1]}" data-srcset="{m[1]} 350w"{m[2]}>',
    "a3-lazy-load": lambda m: f'<img src="//scrapeme.live/wp-content/plugins/a3-lazy-load/assets/images/'
                              f'lazy_placeholder.gif" data-lazy-type="image" data-src="{m[1]}"{m[2]}>',
    "jquery-lazyload": lambda m: f'<img data-original="{m[1]}"{m[2]}>',
    "noscript copy only": lambda m: f'<img src="{GIF}"{m[2]}><noscript><img src="{m[1]}"></noscript>',
    "srcset only": lambda m: f'<img srcset="{m[1]} 350w, https://scrapeme.live/small.png 150w"{m[2]}>',
}


@pytest.mark.parametrize("theme", LAZY_THEMES)
def test_scrapeme_reads_the_image_a_lazy_loading_theme_hides(theme):
    """The same listing with its images lazy-loaded: every product keeps its image URL, and passes validation (a
    placeholder read from src was a data: URI, which quarantined every product of such a shop)."""
    plain = (FIXTURES / "scrapeme_shop_page2.html").read_text()
    lazy = re.sub(r'<img [^>]*?src="([^"]+)"([^>]*?)/?>', LAZY_THEMES[theme], plain)
    assert lazy != plain
    url = "https://scrapeme.live/shop/page/2/"

    def products(body):
        spider = make_spider(ScrapemeSpider)
        spider.crawler.spider = spider
        response = HtmlResponse(url=url, body=body.encode(), encoding="utf-8", request=Request(url))
        clean = CleanPipeline.from_crawler(spider.crawler)
        return [clean.process_item(i) for i in split(list(spider.parse(response)))[0]]

    expected = [p.image_url for p in products(plain)]
    assert expected[0] == "https://scrapeme.live/wp-content/uploads/2018/08/012-350x350.png"
    items = products(lazy)
    assert [p.image_url for p in items] == expected
    assert [field_problems(p).get("image_url") for p in items] == [None] * len(items)


def test_scrapeme_product_ids_without_add_to_cart_buttons():
    """A shop in catalogue mode (no add-to-cart button in its listing, a common theme option) keeps each product's
    id: the same WordPress post id, from the item's class; without it every product would be quarantined."""
    plain = (FIXTURES / "scrapeme_shop_page2.html").read_text()
    catalogue = re.sub(r"<a [^>]*data-product_id[^>]*>.*?</a>", "", plain, flags=re.S)
    assert "data-product_id" not in catalogue
    url = "https://scrapeme.live/shop/page/2/"
    ids = []
    for body in (plain, catalogue):
        response = HtmlResponse(url=url, body=body.encode(), encoding="utf-8", request=Request(url))
        ids.append([p.id for p in split(list(make_spider(ScrapemeSpider).parse(response)))[0]])
    assert ids[1] == ids[0] == ["775", "777", "779", "781"]


def test_generic_title_is_never_an_svg_icons():
    """A page without a <title> of its own but with inline SVG icons (their <title> is for screen readers): the
    stored title is none, not the first icon's name; a page with its own title keeps it, wherever it is."""
    spider = make_spider(GenericSpider)
    icon = "<svg viewBox='0 0 8 8'><title>Search icon</title><path d='M0 0'/></svg>"
    titles = []
    for body in (f"<html><head><meta charset='utf-8'></head><body>{icon}<h1>Shop</h1></body></html>",
                 f"<html><head><title>Shop home</title></head><body>{icon}</body></html>",
                 f"<html><body>{icon}<title>Late title</title></body></html>"):
        response = HtmlResponse(url="https://shop.example/", body=body.encode(), encoding="utf-8",
                                request=Request("https://shop.example/"))
        titles.append(split(list(spider.parse(response)))[0][0].title)
    assert titles == [None, "Shop home", "Late title"]


@pytest.mark.parametrize("title", [
    r'<h3 class="woocommerce-loop-product__title">\1</h3>',  # a theme's h3
    r'<h2 class="woocommerce-loop-product__title"><a href="#">\1</a></h2>',  # its title a link
    r'<h2 class="woocommerce-loop-product__title"><span class="badge">\1</span></h2>',
])
def test_scrapeme_product_names_in_other_themes_title_markup(title):
    plain = (FIXTURES / "scrapeme_shop_page2.html").read_text()
    themed = re.sub(r'<h2 class="woocommerce-loop-product__title">([^<]*)</h2>', title, plain)
    assert themed != plain
    url = "https://scrapeme.live/shop/page/2/"
    names = []
    for body in (plain, themed):
        response = HtmlResponse(url=url, body=body.encode(), encoding="utf-8", request=Request(url))
        names.append([" ".join(p.name.split()) for p in split(list(make_spider(ScrapemeSpider).parse(response)))[0]])
    assert names[1] == names[0] == ["Butterfree", "Weedle", "Kakuna", "Beedrill"]


def test_image_url_passes_over_placeholders():
    page = Selector(text=f'<div><img src="{GIF}"><img src=" about:blank "><img src="/a.png"></div>'
                         f'<p><img src=""></p>')
    assert image_url(page.css("div")) == "/a.png"
    assert image_url(page.css("p")) is None
    assert image_url(page.css("div img")[2]) == "/a.png"
    assert image_url(Selector(text='<img data-srcset=" /b.png 2x, /c.png 1x">')) == "/b.png"
    assert image_url(Selector(text='<img srcset="/b.png, /c.png 2x">')) == "/b.png"
    cdn = "https://res.cdn.example/image/upload/w_300,h_200,c_fill/a.jpg"
    assert image_url(Selector(text=f'<img src="{GIF}" data-srcset="{cdn} 300w, {cdn.replace("300", "600")} 600w">')) == cdn


def test_scrapeme_follows_only_the_seed_host():
    spider = make_spider(ScrapemeSpider)
    # a local copy of the shop: absolute links to scrapeme.live are not followed
    response = fixture_response(
        "scrapeme_shop_page2.html", "http://127.0.0.1:8000/shop/page/2/", meta={SEED_HOST: "127.0.0.1"}
    )
    _, requests = split(list(spider.parse(response)))
    assert requests == []
    assert spider.crawler.stats.get_value("follow/offsite_skipped") == 9  # all pagination links


def test_quotes_page():
    spider = make_spider(QuotesSpider)
    response = fixture_response("quotes_page1.html", "https://quotes.toscrape.com/")
    items, requests = split(list(spider.parse(response)))
    assert [type(i) for i in items] == [Quote] * 3
    einstein = items[0]
    assert einstein.text.startswith("“The world as we have created it")
    assert einstein.author == "Albert Einstein"
    assert einstein.author_url == "https://quotes.toscrape.com/author/Albert-Einstein"
    assert einstein.tags == ["change", "deep-thoughts", "thinking", "world"]
    assert items[2].tags == []
    assert [r.url for r in requests] == ["https://quotes.toscrape.com/page/2/"]


def test_generic_page_and_links():
    spider = make_spider(GenericSpider)
    response = fixture_response("generic_page.html", "https://example.org/dir/index.html")
    items, requests = split(list(spider.parse(response)))
    (page,) = items
    assert isinstance(page, Page)
    assert page.title.strip() == "Example  Domain"
    assert page.description == "An example page for the generic spider."
    assert page.h1 == "Hello world"
    assert page.status == 200
    assert sorted(r.url for r in requests) == ["https://example.org/about", "https://example.org/dir/sub/page.html"]


def test_generic_depth_limit_defaults_to_3_and_can_be_overridden():
    assert make_spider(GenericSpider).crawler.settings.getint("DEPTH_LIMIT") == 3
    crawler_settings = {"GENERIC_DEPTH_LIMIT": 5}
    assert make_spider(GenericSpider, **crawler_settings).crawler.settings.getint("DEPTH_LIMIT") == 5
    # other spiders are not depth-limited
    assert make_spider(ScrapemeSpider).crawler.settings.getint("DEPTH_LIMIT") == 0


def test_an_idle_worker_looks_at_every_partition_once_more_before_it_closes(monkeypatch):
    """MAX_IDLE_TIME_BEFORE_CLOSE: once a count found the frontier empty, the idle checks read the cheap signs only,
    and another worker's leases show there at its next heartbeat. A worker whose wait is over looks at every
    partition once more: work there (another worker took the seed the moment before, and logs in) starts the wait
    again; it closes when that look finds nothing too."""
    from types import SimpleNamespace

    from scrapy.exceptions import DontCloseSpider

    import crawlhub.spider

    spider = make_spider(ScrapemeSpider, MAX_IDLE_TIME_BEFORE_CLOSE=8)
    spider.next_seed_requests = lambda: iter(())
    left = [False]  # what every partition holds: nothing, until another worker leases the seed
    looks: list[bool] = []

    def look() -> bool:
        looks.append(left[0])
        return left[0]

    frontier = SimpleNamespace(budget_exhausted=False, work_waiting=False, pending=lambda: False, leases_elsewhere=0,
                               left=look)
    monkeypatch.setattr(crawlhub.spider, "frontier_of", lambda crawler: frontier)

    def idle_check(after: float) -> bool:
        """One idle check ``after`` seconds into the wait; whether the worker closes."""
        spider._last_idle_check = None  # (not a stopped process: the checks are close enough)
        if spider._idle_since is not None:
            spider._idle_since = time.monotonic() - after
        try:
            spider._on_idle(spider)
        except DontCloseSpider:
            return False
        return True

    assert not idle_check(0) and not idle_check(1) and looks == [False], "counted once: empty"
    left[0] = True  # another worker leased the seed; its heartbeat has not said so yet
    assert not idle_check(5) and looks == [False], "the cheap signs only"
    assert not idle_check(8.5), "its wait is over, but the last look finds the other worker's lease"
    assert looks == [False, True] and time.monotonic() - spider._idle_since < 1, "the wait starts again"
    left[0] = False
    assert not idle_check(3), "a wait not over"
    assert idle_check(8.5), "nothing left at the last look: it closes"


def test_a_seed_with_an_internationalised_host_follows_its_own_links():
    """Scrapy keeps a request's host in its IDNA form (bücher.example -> xn--bcher-kva.example): the seed's host is
    taken from its request, so the site's links are on it, and its politeness key is the one the requests have."""
    from scrapy.http import HtmlResponse

    from crawlhub._utils.urls import domain_of

    spider = make_spider(GenericSpider)
    seed = spider.make_request_from_seed("http://Bücher.example/start".encode())
    assert seed.url == "http://xn--bcher-kva.example/start" and seed.meta[SEED_HOST] == "xn--bcher-kva.example"
    assert domain_of("http://bücher.example/x") == domain_of(seed.url) == "xn--bcher-kva.example"
    body = ('<a href="/a">a</a> <a href="http://bücher.example/b">b</a> <a href="http://xn--bcher-kva.example/c">c</a>'
            ' <a href="http://other.example/d">d</a>')
    response = HtmlResponse(seed.url, body=body.encode(), encoding="utf-8", request=seed)
    followed = {r.url for r in spider.follow_links(response, response.css("a::attr(href)").getall())}
    assert followed == {f"http://xn--bcher-kva.example/{p}" for p in "abc"}
    assert spider.crawler.stats.get_value("follow/offsite_skipped") == 1


@pytest.mark.parametrize("doc", ["README.md", "docs/spiders.md"])
def test_the_readme_spider_gives_a_book_one_id_from_every_listing_page(doc):
    """The example spider of the README and of docs/spiders.md (books.toscrape.com's markup): a book listed on the
    home page and on a catalogue page, whose hrefs are relative to different directories, is one id and one URL, so
    one stored document."""
    readme = (FIXTURES.parent.parent / doc).read_text()
    (source,) = [block for block in re.findall(r"```python\n(.*?)```", readme, flags=re.S) if "article.product_pod" in block]
    namespace: dict = {}
    exec(compile(source, doc, "exec"), namespace)  # noqa: S102 - the project's own documentation
    spider = make_spider(namespace["BooksSpider"])
    pod = ('<article class="product_pod"><h3><a href="{href}" title="A Light in the Attic">A Light...</a></h3>'
           '<p class="price_color">£51.77</p></article>')
    found = []
    for url, href in (("https://books.toscrape.com/index.html", "catalogue/a-light-in-the-attic_1000/index.html"),
                      ("https://books.toscrape.com/catalogue/page-2.html", "a-light-in-the-attic_1000/index.html")):
        response = HtmlResponse(url=url, body=pod.format(href=href).encode(), encoding="utf-8", request=Request(url))
        (book,) = split(list(spider.parse(response)))[0]
        found.append((book.id, book.url))
    page = "https://books.toscrape.com/catalogue/a-light-in-the-attic_1000/index.html"
    assert found == [(page, page)] * 2
