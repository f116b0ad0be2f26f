"""Data quality (#27): a broken extraction is noticed and never damages what is stored.

Real workers revisit a local shop; the shop then changes its markup on some pages (same products, a theme that
renames ``li.product``), reverts, and really removes products: the store keeps everything the broken pages
cannot see, the event names the pages, and real removals are still marked."""


from __future__ import annotations


def test_the_verdict_of_a_page():
    from scrapy.utils.test import get_crawler

    from crawlhub.extensions.quality import QualityMonitor, url_pattern
    from tests.helpers import project_settings

    monitor = QualityMonitor(get_crawler(settings_dict=project_settings()))
    assert monitor.verdict(200, 16, 0, {"items": 16}) == ("healthy", "")
    assert monitor.verdict(200, 15, 0, {"items": 16}) == ("healthy", ""), "a product removed is a removal"
    assert monitor.verdict(200, 0, 0, {"items": 16})[0] == "broken"
    assert monitor.verdict(200, 7, 0, {"items": 16})[0] == "broken", "less than QUALITY_PAGE_MIN_SHARE of it"
    assert monitor.verdict(200, 0, 0, {}) == ("healthy", ""), "no baseline: nothing to judge against"
    assert monitor.verdict(404, 0, 0, {"items": 16})[0] == "healthy", "a 404's items are gone"
    assert monitor.verdict(200, 16, 2, {"items": 16}) == ("degraded", "2 of its 16 item(s) quarantined")
    assert url_pattern("https://shop.example:8443/shop/page/12/?orderby=price") == "shop.example:8443/shop/page/*/"
    import re

    assert url_pattern("https://shop.example/shop/page/2/", (re.compile(r"/shop/page/"),)) == "/shop/page/"
