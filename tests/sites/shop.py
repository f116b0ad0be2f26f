"""A generated WooCommerce (Storefront) shop with the markup of scrapeme.live/shop.

``ul.products > li.product``, the product id in ``a[data-product_id]``, the
name in ``h2``, the price in ``.amount`` and WordPress pagination
(``/shop/page/N/``). The tests crawl it; so does ``make demo``.
"""

from __future__ import annotations

import html
from collections.abc import Iterable

NAMES = ["Bulbasaur", "Ivysaur", "Venusaur", "Charmander", "Charmeleon", "Charizard", "Squirtle", "Wartortle", "Blastoise", "Caterpie", "Metapod", "Butterfree", "Weedle", "Kakuna", "Beedrill", "Pidgey", "Pidgeotto", "Pidgeot", "Rattata", "Raticate", "Spearow", "Fearow", "Ekans", "Arbok", "Pikachu", "Raichu", "Sandshrew", "Sandslash", "Nidoran", "Nidorina", "Nidoqueen", "Nidorino", "Nidoking", "Clefairy", "Clefable", "Vulpix", "Ninetales", "Jigglypuff", "Wigglytuff", "Zubat", "Golbat", "Oddish"]

def product_name(i: int) -> str:
    return f"{NAMES[i % len(NAMES)]} {i // len(NAMES) + 1}" if i >= len(NAMES) else NAMES[i]


def product_price(i: int) -> str:
    return f"{10 + (i * 137) % 9000 / 100:.2f}"


def shop_products(count: int, first_id: int = 700) -> list[dict]:
    return [
        {
            "id": str(first_id + i),
            "name": product_name(i),
            "price": product_price(i),
            "slug": product_name(i).lower().replace(" ", "-"),
        }
        for i in range(count)
    ]


def _pagination(page: int, pages: int, page_url, window: int = 2) -> str:
    shown = sorted({1, 2, pages - 1, pages, *range(page - window, page + window + 1)} & set(range(1, pages + 1)))
    items, last = [], 0
    if page > 1:
        items.append(f'<li><a class="prev page-numbers" href="{page_url(page - 1)}">&larr;</a></li>')
    for n in shown:
        if n - last > 1:
            items.append('<li><span class="page-numbers dots">&hellip;</span></li>')
        if n == page:
            items.append(f"<li><span aria-current='page' class='page-numbers current'>{n}</span></li>")
        else:
            items.append(f"<li><a class='page-numbers' href='{page_url(n)}'>{n}</a></li>")
        last = n
    if page < pages:
        items.append(f'<li><a class="next page-numbers" href="{page_url(page + 1)}">&rarr;</a></li>')
    return "<nav class=\"woocommerce-pagination\">\n<ul class='page-numbers'>\n" + "\n".join(items) + "\n</ul>\n</nav>"


def _product_li(p: dict, base: str, position: int) -> str:
    first = " first" if position % 4 == 0 else (" last" if position % 4 == 3 else "")
    name = html.escape(p["name"])
    return f"""<li class="post-{p['id']} product type-product status-publish has-post-thumbnail{first} instock purchasable product-type-simple">
	<a href="{base}/shop/{p['slug']}/" class="woocommerce-LoopProduct-link woocommerce-loop-product__link"><img width="324" height="324" src="{base}/wp-content/uploads/2018/08/{p['id']}-350x350.png" class="attachment-woocommerce_thumbnail size-woocommerce_thumbnail wp-post-image" alt="" /><h2 class="woocommerce-loop-product__title">{name}</h2>
	<span class="price"><span class="woocommerce-Price-amount amount"><span class="woocommerce-Price-currencySymbol">&pound;</span>{p['price']}</span></span>
</a><a href="/shop/page/1/?add-to-cart={p['id']}" data-quantity="1" class="button product_type_simple add_to_cart_button ajax_add_to_cart" data-product_id="{p['id']}" data-product_sku="{int(p['id']) * 7}" aria-label="Add &ldquo;{name}&rdquo; to your basket" rel="nofollow">Add to basket</a></li>"""


def shop_pages(
    products: int = 400,
    per_page: int = 16,
    base: str = "",
    alias_page_one: bool = False,
    chain: bool = False,
    window: int = 2,
    first_id: int = 700,
    without: Iterable[str] = (),
) -> dict[str, str]:
    """The listing pages of a shop: ``/shop/`` and ``/shop/page/N/``.

    ``alias_page_one``: pages link to page 1 as ``/shop/page/1/`` (as
    WordPress does) and that URL serves the same page as ``/shop/``.
    ``chain``: each page links to the next one only (one request in flight
    at a time across the cluster: good for ordering tests).
    ``base`` prefixes absolute links (product and image URLs), like
    scrapeme.live's absolute links; empty = site-relative.
    ``window``: how many pages either side of the current one the
    pagination links to (WordPress shows 2). ``first_id``: the first product id (several shops
    with distinct products: items are keyed by host and id, and every local shop is 127.0.0.1). ``without``: the ids
    of products the shop no longer has (removed: the products after them shift up, across pages).
    """
    gone = set(without)
    items = [p for p in shop_products(products, first_id) if p["id"] not in gone]
    products = len(items)
    pages = max(1, -(-products // per_page))

    def page_url(n: int) -> str:
        return "/shop/" if n == 1 and not alias_page_one else f"/shop/page/{n}/"

    out: dict[str, str] = {}
    for page in range(1, pages + 1):
        chunk = items[(page - 1) * per_page : page * per_page]
        lis = "\n".join(_product_li(p, base, i) for i, p in enumerate(chunk))
        if chain:
            nav = (
                f'<nav class="woocommerce-pagination"><ul class="page-numbers"><li><a class="next page-numbers" '
                f'href="{page_url(page + 1)}">&rarr;</a></li></ul></nav>'
                if page < pages else ""
            )
        else:
            nav = _pagination(page, pages, page_url, window)
        start, end = (page - 1) * per_page + 1, (page - 1) * per_page + len(chunk)
        body = f"""<!doctype html>
<html lang="en-GB"><head><meta charset="UTF-8"><title>Products &#8211; Page {page} &#8211; ScrapeMe</title></head>
<body class="archive post-type-archive post-type-archive-product woocommerce woocommerce-page">
<div id="page" class="hfeed site"><div id="content" class="site-content"><div class="col-full">
<div id="primary" class="content-area"><main id="main" class="site-main" role="main">
<header class="woocommerce-products-header"><h1 class="woocommerce-products-header__title page-title">Shop</h1></header>
<div class="storefront-sorting"><p class="woocommerce-result-count">Showing {start}&ndash;{end} of {products} results</p>
{nav}</div>
<ul class="products columns-4">
{lis}
</ul>
<div class="storefront-sorting">{nav}</div>
</main></div></div></div></div></body></html>"""
        out[page_url(page)] = body
        if page == 1:
            out["/shop/"] = body
    return out


CHALLENGE = "Checking your browser before accessing"


def challenged(pages: dict[str, str]) -> dict[str, str]:
    """``pages`` behind a JavaScript challenge, as an anti-bot service serves them: each answers 200 with the
    CHALLENGE text and a script that replaces the document with the page. A client that runs no JavaScript
    (Scrapy, curl_cffi) sees only the challenge, whatever its TLS; Chromium sees the page."""
    import json
    import re

    out = {}
    for path, body in pages.items():
        inner = re.sub(r"(?is)^.*?<html[^>]*>|</html>\s*$", "", body)
        script = json.dumps(inner).replace("</", "<\\/")
        out[path] = (f'<!doctype html><html><head><title>Just a moment...</title></head><body>'
                     f'<p id="challenge">{CHALLENGE}</p>'
                     f"<script>document.documentElement.innerHTML = {script};</script></body></html>")
    return out
