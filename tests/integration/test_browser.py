"""Integration: headless Chromium (Debian's, through scrapy-playwright) only where it is needed.

Real `scrapy crawl` workers, real Chromium, local sites. The sites' access
logs tell which pages a browser rendered: every JavaScript page loads
/static/render.js?for=<its path>, which a plain request never fetches.
"""

from __future__ import annotations

import json
import time
from collections import Counter

import pytest

from crawlhub._utils.urls import domain_of
from crawlhub.browser import MARKED
from tests.harness import run_workers
from tests.sites.quotes import quote_pages, quote_pages_js, render_handler, rendered

pytestmark = pytest.mark.usefixtures("chromium")  # missing: fails, unless CRAWLHUB_SKIP_BROWSER_TESTS=1

FIELDS = ("text", "author", "author_url", "tags")


def stored_quotes(db) -> set:
    return {tuple(tuple(d[f]) if f == "tags" else d[f] for f in FIELDS) for d in db.quotes.find()}


def test_js_page_needs_the_browser_and_quotes_js_matches_quotes(env, site, redis_client, mongo_db, tmp_path):
    shop = site({**quote_pages(3, 4), **quote_pages_js(3, 4)}, handler=render_handler)

    # plain: the JavaScript pages show no quote
    redis_client.lpush("quotes:start_urls", f"{shop.url}/js/")
    run_workers("quotes", dict(env, MONGO_DATABASE=mongo_db.name + "_plainjs"), tmp_path / "a", 1)
    assert mongo_db.client[mongo_db.name + "_plainjs"].quotes.count_documents({}) == 0 and rendered(shop) == []
    mongo_db.client.drop_database(mongo_db.name + "_plainjs")

    # the browser: all of them, the same items as `quotes` gets from the plain pages
    redis_client.lpush("quotes_js:start_urls", f"{shop.url}/js/")
    (worker,) = run_workers("quotes_js", env, tmp_path / "b", 1, timeout=180)
    assert sorted(rendered(shop)) == ["/js/", "/js/page/2/", "/js/page/3/"]
    browser_quotes = stored_quotes(mongo_db)
    assert len(browser_quotes) == 12
    assert "'browser/pages/" in worker.log() and "Browser: " in worker.log()
    assert worker.log().count("Browser: ") == 1, "one browser line per worker, not one per scheme's handler"

    plain_db = mongo_db.client[mongo_db.name + "_plain"]
    redis_client.lpush("quotes:start_urls", f"{shop.url}/")
    run_workers("quotes", dict(env, MONGO_DATABASE=plain_db.name), tmp_path / "c", 1)
    try:
        assert stored_quotes(plain_db) == browser_quotes
    finally:
        mongo_db.client.drop_database(plain_db.name)


def test_adaptive_fallback_renders_only_what_needs_it(env, site, redis_client, mongo_db, tmp_path):
    # a mixed site: pages 3 and 6 show their quotes only with JavaScript
    js = quote_pages_js(6, 4, prefix="")
    mixed = site({**quote_pages(6, 4), "/page/3/": js["/page/3/"], "/page/6/": js["/page/6/"]}, handler=render_handler)
    redis_client.lpush("quotes_auto:start_urls", f"{mixed.url}/")
    run_workers("quotes_auto", env, tmp_path / "a", 1, timeout=180)
    assert sorted(rendered(mixed)) == ["/page/3/", "/page/6/"], "exactly the JS-only pages went through the browser"
    assert mongo_db.quotes.count_documents({}) == 24
    assert not redis_client.sismember(MARKED, domain_of(mixed.url)), "2 of 6 pages: the domain stays plain"

    # a JavaScript-only site: the first fallback marks the domain for the cluster...
    only_js = site(quote_pages_js(4, 4, prefix=""), handler=render_handler)
    redis_client.lpush("quotes_auto:start_urls", f"{only_js.url}/page/4/")
    run_workers("quotes_auto", env, tmp_path / "b", 1, timeout=180)
    assert redis_client.sismember(MARKED, domain_of(only_js.url))
    assert Counter(h.path for h in only_js.hits)["/page/4/"] == 2, "plain first, then the browser"

    # ...and a second worker renders it directly: one fetch per page, each rendered
    only_js.hits.clear()
    redis_client.lpush("quotes_auto:start_urls", f"{only_js.url}/")
    (second,) = run_workers("quotes_auto", env, tmp_path / "c", 1, timeout=180)
    # (the pages the crawler asked for: not a page's scripts, robots.txt, or the favicon Chromium asks for on its own
    # after a page loads, now and then: Playwright never shows that request, so nothing can route or abort it)
    pages = Counter(h.path for h in only_js.hits
                    if not h.path.startswith("/static/") and h.path not in ("/robots.txt", "/favicon.ico"))
    assert pages == {"/": 1, "/page/2/": 1, "/page/3/": 1}, pages
    assert sorted(rendered(only_js)) == ["/", "/page/2/", "/page/3/"]
    assert "rendering it in the browser" not in second.log()
    assert "'item_scraped_count': 12" in second.log(), "3 rendered pages, 4 quotes each"
    assert mongo_db.quotes.count_documents({}) == 24, "the same quotes as the mixed site's: updated, not stored twice"


def test_page_that_never_loads_times_out_retries_then_dead_letters(env, site, redis_client, tmp_path):
    def never_loads(site_, path):
        if path.startswith("/static/never.js"):
            time.sleep(20)
            return 200, "application/javascript", "", {}
        if path == "/slow/":
            return 200, "text/html", '<html><body><script src="/static/never.js"></script></body></html>', {}
        return None

    slow = site({}, handler=never_loads)
    redis_client.lpush("quotes_js:start_urls", f"{slow.url}/slow/")
    (worker,) = run_workers("quotes_js", env, tmp_path, 1, timeout=180,
                            BROWSER_TIMEOUT=2, RETRY_TIMES=1, RETRY_BACKOFF_BASE=0.2)
    if Counter(h.path for h in slow.hits)["/slow/"] != 2:
        print(worker.log()[-4000:])  # the worker's last words, shown with the failure below
    assert Counter(h.path for h in slow.hits)["/slow/"] == 2, "tried, then retried once"
    (letter,) = [__import__("json").loads(r) for r in redis_client.lrange("quotes_js:dlq", 0, -1)]
    assert letter["error"].startswith("browser timeout"), letter["error"]
    assert letter["attempts"] == 2
    assert redis_client.zcard("quotes_js:inflight") == 0


@pytest.mark.parametrize("chromium", ["hangs", "exits"])
def test_a_chromium_that_does_not_start_is_the_workers_failure_not_the_pages(env, site, redis_client, tmp_path, chromium):
    """Chromium's start has its own budget (BROWSER_LAUNCH_TIMEOUT), not the page's (BROWSER_TIMEOUT: a slow start
    on a loaded machine must not time a page out); a start that fails says so, and the page still ends in the DLQ."""
    broken = tmp_path / "chromium"
    broken.write_text("#!/bin/sh\nexec sleep 60\n" if chromium == "hangs" else "#!/bin/sh\necho broken >&2\nexit 1\n")
    broken.chmod(0o755)
    shop = site(quote_pages_js(1, 4), handler=render_handler)
    redis_client.lpush("quotes_js:start_urls", f"{shop.url}/js/")
    (worker,) = run_workers("quotes_js", env, tmp_path, 1, timeout=180, CHROMIUM_PATH=broken,
                            BROWSER_LAUNCH_TIMEOUT=1, BROWSER_TIMEOUT=60, RETRY_TIMES=1, RETRY_BACKOFF_BASE=0.2)
    assert "/js/" not in [h.path for h in shop.hits]
    (letter,) = [json.loads(r) for r in redis_client.lrange("quotes_js:dlq", 0, -1)]
    assert letter["error"].startswith("browser did not start: BrowserType.launch"), letter["error"]
    assert letter["attempts"] == 2
    log = worker.log()
    assert log.count("ERROR: Chromium did not start") == 1, "said once per worker, at error level"
    assert "'browser/launch_failures': 2" in log and "browser/timeouts" not in log


def test_browser_spiders_obey_robots_txt_fetched_over_plain_http(env, site, redis_client, mongo_db, tmp_path):
    robots = (200, "text/plain", "User-agent: *\nDisallow: /js/page/2/\n", {})
    shop = site({**quote_pages_js(3, 4), "/robots.txt": robots}, handler=render_handler)
    redis_client.lpush("quotes_js:start_urls", f"{shop.url}/js/")
    (worker,) = run_workers("quotes_js", env, tmp_path, 1, timeout=180)
    assert rendered(shop) == ["/js/"], "page 2 is disallowed (and page 3 is only linked from it)"
    assert "/js/page/2/" not in [h.path for h in shop.hits]
    assert "robots.txt of " in worker.log() and "bytes of rules" in worker.log()
    assert redis_client.hget("quotes_js:stats", f"robots_disallowed:{domain_of(shop.url)}") == b"1"
    assert mongo_db.quotes.count_documents({}) == 4


def test_https_with_a_certificate_that_does_not_verify(env, site, redis_client, mongo_db, tmp_path):
    """Plain pages and browser pages agree: crawled by default (Scrapy's own default), both refused with TLS_VERIFY."""
    shop = site({**quote_pages(2, 4), **quote_pages_js(2, 4)}, handler=render_handler, tls=True)
    assert shop.url.startswith("https://")
    redis_client.lpush("quotes_js:start_urls", f"{shop.url}/js/")
    redis_client.lpush("quotes:start_urls", f"{shop.url}/")
    run_workers("quotes_js", env, tmp_path / "a", 1, timeout=180)
    run_workers("quotes", dict(env, MONGO_DATABASE=mongo_db.name + "_plain"), tmp_path / "b", 1)
    assert sorted(rendered(shop)) == ["/js/", "/js/page/2/"] and mongo_db.quotes.count_documents({}) == 8
    assert mongo_db.client[mongo_db.name + "_plain"].quotes.count_documents({}) == 8
    mongo_db.client.drop_database(mongo_db.name + "_plain")

    redis_client.flushdb()
    shop.hits.clear()
    redis_client.lpush("quotes_js:start_urls", f"{shop.url}/js/")
    redis_client.lpush("quotes:start_urls", f"{shop.url}/")
    strict = {"TLS_VERIFY": True, "ROBOTSTXT_OBEY": False, "RETRY_TIMES": 0}
    run_workers("quotes_js", env, tmp_path / "c", 1, timeout=180, **strict)
    run_workers("quotes", env, tmp_path / "d", 1, timeout=180, **strict)
    assert shop.hits == [], "no request got through the TLS handshake"
    for spider in ("quotes_js", "quotes"):
        (letter,) = [json.loads(r) for r in redis_client.lrange(f"{spider}:dlq", 0, -1)]
        assert "certificate" in letter["error"].lower() or "CERT" in letter["error"], letter["error"]
