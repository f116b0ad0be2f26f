"""Continuous crawling on real workers: pages come back when due, conditional GET, the status store."""

from __future__ import annotations

import io
import json
import re
import threading
import time
from datetime import timedelta

from crawlhub.export import export, plan
from crawlhub.revisit.store import StatusStore
from tests.harness import cli, start_worker, wait_for
from tests.sites.shop import product_price, shop_pages

SPIDERS = "spiders,tests.sites.spiders"


def wait_until(check, timeout: float, what: str):
    value = wait_for(check, timeout, step=0.1)
    assert value, f"timed out after {timeout}s waiting for {what}"
    return value


def test_due_pages_come_back_once_each_with_conditional_get(env, site, redis_client, mongo_db, tmp_path):
    pages = shop_pages(48, 8)  # /shop/ and /shop/page/2/ .. /shop/page/6/
    listing = sorted({p for p in pages if p != "/shop/page/1/"})
    shop = site(pages, conditional=True)
    env = {**env, "SPIDER_MODULES": SPIDERS, "MAX_IDLE_TIME_BEFORE_CLOSE": "0", "REFRESH_INTERVAL": "0.3"}
    redis_client.lpush("t_revisit:start_urls", f"{shop.url}/shop/")
    workers = [start_worker("t_revisit", env, tmp_path, f"w{i}") for i in range(3)]

    def fetches(status=None):
        return [h for h in shop.hits if h.path in listing and (status is None or h.status == status)]

    try:
        wait_until(lambda: {h.path for h in fetches()} == set(listing), 60, "the first cycle")
        first_cycle = {h.path: h.at for h in fetches()}
        wait_until(lambda: mongo_db.products.count_documents({}) == 48
                   and mongo_db.url_status.count_documents({}) == len(listing), 30, "the first cycle stored")
        first = {d["id"]: d for d in mongo_db.products.find()}
        assert len(first_cycle) == len(fetches()), "the first cycle fetched each page once"
        # version 2 of the shop: a price on page 2 moves; on page 3 a product is replaced by a new one
        new_price = "99.99"
        pages["/shop/page/2/"] = pages["/shop/page/2/"].replace(f"</span>{product_price(10)}</span>",
                                                                f"</span>{new_price}</span>")
        pages["/shop/page/3/"] = pages["/shop/page/3/"].replace('data-product_id="720"', 'data-product_id="999"')
        wait_until(lambda: len(fetches()) == 2 * len(listing), 60, "every page fetched a second time")
    finally:
        for worker in workers:
            worker.proc.terminate()
        for worker in workers:
            worker.wait(30)
    second_cycle = [h for h in fetches() if h.arrived > first_cycle[h.path]]
    assert sorted(h.path for h in second_cycle) == listing, "exactly the due pages, once each"
    for hit in second_cycle:
        assert hit.arrived - first_cycle[hit.path] >= 4.0 - 0.2, f"{hit.path} fetched again before it was due"
    changed = {"/shop/page/2/", "/shop/page/3/"}
    assert {h.path for h in second_cycle if h.status == 304} == set(listing) - changed, "the unchanged pages: 304"
    assert {h.path for h in second_cycle if h.status == 200} == changed
    assert all(("If-None-Match" in dict(h.headers)) for h in second_cycle), "a revisit asks conditionally"

    second = {d["id"]: d for d in mongo_db.products.find()}
    assert second["710"]["price"] == new_price, "MongoDB holds the new price"
    assert "999" in second, "the new product is stored"
    assert [i for i, d in second.items() if d.get("gone_at")] == ["720"], "the removed product is marked gone, kept"
    unparsed = [i for i, d in first.items() if d["source_url"].endswith(("/shop/", "/4/", "/5/", "/6/"))]
    assert all(second[i]["last_seen"] == first[i]["last_seen"] for i in unparsed), "a 304 is not parsed"
    history = [{k: c[k] for k in ("collection", "field", "old", "new")} | {"id": c["key"]["id"]}
               for c in mongo_db.changes.find()]
    assert history == [{"collection": "products", "field": "price", "old": product_price(10), "new": new_price,
                        "id": "710"}], "the history holds exactly the changed price, old and new"

    status = {d["url"].removeprefix(shop.url): d for d in mongo_db.url_status.find({"spider": "t_revisit"})}
    assert set(status) == set(listing)
    for path, doc in status.items():
        assert doc["fetches"] == 2
        if path in changed:  # a changed page comes back sooner: 4 s x 0.8, raised to revisit_min
            assert (doc["changes"], doc.get("unchanged", 0), doc["interval"]) == (1, 0, 3.5)
        else:  # unchanged: 4 s x 1.2, capped at revisit_max
            assert (doc.get("changes", 0), doc["unchanged"], doc["interval"]) == (0, 1, 4.5)
            assert doc["last_status"] == 304 and doc["etag"]
        assert abs(doc["next_fetch"] - (doc["last_fetch"] + doc["interval"])) < 0.01

    status = json.loads(cli(env, "status", "t_revisit", "--json").stdout)["items"]["revisit"]
    assert status["pages"] == 6 and status["due_now"] + status["fresh"] == 6
    assert "revisits: 6 pages in the status store" in cli(env, "status", "t_revisit").stdout
    report = tmp_path / "report.html"
    assert cli(env, "report", "t_revisit", "--html", str(report)).returncode == 0
    page = report.read_text()
    assert 'id="freshness"' in page and "<td>&lt; 1 h</td><td>6</td>" in page, "six pages fetched within the hour"
    assert 'id="changes-over-time"' in page and "<title>" in page.split('id="changes-over-time"')[1]
    schedule = json.loads(cli(env, "schedule", "t_revisit", "--json").stdout)
    assert (schedule["urls"], schedule["fetches"], schedule["changes"], schedule["unchanged"]) == (6, 12, 2, 4)
    assert schedule["redirected"] == 0
    assert "0 page(s) of t_revisit due now" in cli(env, "recrawl", "t_revisit", "--older-than", "1h").stdout
    assert cli(env, "recrawl", "t_revisit", "--all").returncode == 0
    assert json.loads(cli(env, "schedule", "t_revisit", "--json").stdout)["due_now"] == 6
    assert cli(env, "recrawl", "t_revisit").returncode == 2, "no pages named: a usage error"


def test_sitemaps_feed_the_crawl_and_a_newer_lastmod_makes_a_page_due(env, site, redis_client, mongo_db, tmp_path):
    from datetime import datetime, timezone

    from tests.sites.sitemaps import sitemap_site

    products = [f"/product/{i}/" for i in range(10)]
    lastmods = dict.fromkeys(products, "2026-01-01")
    shop = site({}, conditional=True)
    shop.pages.update(sitemap_site(shop.url, lastmods))
    env = {**env, "SPIDER_MODULES": SPIDERS, "MAX_IDLE_TIME_BEFORE_CLOSE": "0", "REFRESH_INTERVAL": "0.3"}
    redis_client.lpush("t_sitemap:start_urls", json.dumps({"sitemap": f"{shop.url}/robots.txt"}))
    workers = [start_worker("t_sitemap", env, tmp_path, f"w{i}") for i in range(2)]

    def product_hits():
        return [h for h in shop.hits if h.path.startswith("/product/")]

    try:
        wait_until(lambda: {h.path for h in product_hits()} == set(products), 60, "every listed product")
        wait_until(lambda: mongo_db.url_status.count_documents({"url": {"$regex": "/product/"}}) == 10, 30,
                   "the products in the status store")
        first_pass = len(product_hits())
        moved = ["/product/1/", "/product/3/", "/product/7/"]  # two in sitemap 1, one in sitemap 2
        time.sleep(1.1)  # a lastmod has whole seconds: after the first pass's last fetch
        now = datetime.now(timezone.utc).isoformat(timespec="seconds")
        shop.pages.update(sitemap_site(shop.url, {**lastmods, **dict.fromkeys(moved, now)}))
        wait_until(lambda: len(product_hits()) >= first_pass + 3, 60, "the three moved products fetched again")
        time.sleep(3)  # the sitemaps are read again meanwhile: nothing else may come back
    finally:
        for worker in workers:
            worker.proc.terminate()
        for worker in workers:
            worker.wait(30)
    hits = product_hits()
    assert first_pass == 10 and sorted(h.path for h in hits[:first_pass]) == sorted(products), \
        "the first pass fetched exactly the listed URLs (not /product/unlisted/)"
    assert sorted(h.path for h in hits[first_pass:]) == sorted(moved), "a pass fetches exactly the three moved"
    assert all(h.status == 304 for h in hits[first_pass:]), "asked conditionally: the pages themselves did not change"
    sitemap_reads = [h for h in shop.hits if h.path == "/sitemap2.xml.gz"]
    assert len(sitemap_reads) >= 3 and {h.status for h in sitemap_reads} >= {200, 304}, "sitemaps are revisited"


def test_a_sitemap_that_gives_no_sitemap_ends_in_the_dlq_with_the_reason(env, site, redis_client, mongo_db, tmp_path):
    """Sitemap seeds where the site answers with no sitemap (an HTML page where the sitemap was, a broken gzip, a
    robots.txt with no Sitemap: line) end in the DLQ with the reason, not as pages that had nothing to say; the
    sitemap that is one feeds the crawl, and a letter requeued once the site is fixed is crawled."""
    import gzip

    from tests.harness import run_workers

    pages = shop_pages(8, 4)
    shop = site(pages)
    urlset = ('<?xml version="1.0" encoding="UTF-8"?><urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">'
              f"<url><loc>{shop.url}/shop/</loc></url></urlset>")
    shop.pages.update({
        "/sitemap.xml": (200, "application/xml", urlset, {}),
        "/soft404.xml": (200, "text/html", "<html><body><h1>Page not found</h1></body></html>", {}),
        "/broken.xml.gz": (200, "application/x-gzip", gzip.compress(urlset.encode())[:40], {}),
        "/robots.txt": (200, "text/plain", "User-agent: *\nAllow: /\n", {}),
    })
    bad = {"/soft404.xml": "is not a sitemap (text/html", "/broken.xml.gz": "cannot be gunzipped",
           "/robots.txt": "has no Sitemap: line"}
    redis_client.lpush("scrapeme:start_urls", *(json.dumps({"sitemap": f"{shop.url}{p}"}) for p in ["/sitemap.xml", *bad]))
    (worker,) = run_workers("scrapeme", env, tmp_path, 1)
    letters = {json.loads(r)["url"]: json.loads(r) for r in redis_client.lrange("scrapeme:dlq", 0, -1)}
    assert set(letters) == {f"{shop.url}{p}" for p in bad}, letters
    for path, reason in bad.items():
        assert "SitemapError" in letters[f"{shop.url}{path}"]["error"] and reason in letters[f"{shop.url}{path}"]["error"]
    assert mongo_db.products.count_documents({}) == 8  # /shop/ from the sitemap, page 2 from its pagination
    assert "'sitemap/invalid': 3" in worker.log()

    # the site fixes its sitemap: the letter requeued is crawled, and leaves the DLQ
    shop.pages["/soft404.xml"] = (200, "application/xml", urlset.replace("/shop/", "/shop/page/2/"), {})
    index = [json.loads(r)["url"] for r in redis_client.lrange("scrapeme:dlq", 0, -1)].index(f"{shop.url}/soft404.xml")
    assert cli(env, "dlq", "requeue", "scrapeme", str(index)).returncode == 0
    run_workers("scrapeme", env, tmp_path, 1)
    assert {json.loads(r)["url"] for r in redis_client.lrange("scrapeme:dlq", 0, -1)} == {
        f"{shop.url}{p}" for p in bad if p != "/soft404.xml"}


def test_a_refresher_killed_mid_batch_loses_and_repeats_nothing(env, site, redis_client, mongo_db, tmp_path):
    import os
    import signal

    paths = [f"/p/{i}/" for i in range(60)]
    pages = {"/": "<html><body>" + "".join(f'<a href="{p}">{p}</a>' for p in paths) + "</body></html>"}
    pages.update({p: f"<html><head><title>{p}</title></head><body>{p}</body></html>" for p in paths})
    shop = site(pages)
    every = ["/", *paths]
    env = {**env, "SPIDER_MODULES": SPIDERS, "MAX_IDLE_TIME_BEFORE_CLOSE": "0", "REFRESH_INTERVAL": "0.2",
           "REFRESH_BATCH": "1", "REFRESH_LOCK_TTL": "1.5", "LEASE_TTL": "3", "LEASE_RECLAIM_INTERVAL": "0.5"}
    redis_client.lpush("t_revisit_pages:start_urls", f"{shop.url}/")
    workers = [start_worker("t_revisit_pages", env, tmp_path, f"w{i}") for i in range(3)]

    def counts():
        found = dict.fromkeys(every, 0)
        for hit in shop.hits:
            if hit.path in found:
                found[hit.path] += 1
        return found

    try:
        wait_until(lambda: min(counts().values()) == 1, 60, "the first cycle")
        wait_until(lambda: mongo_db.url_status.count_documents({}) == len(every), 30, "the status store")
        # the refresher starts queueing the second cycle, one page per batch: kill -9 its worker mid-way
        wait_until(lambda: redis_client.hlen("t_revisit_pages:revisits") >= 1, 30, "the refresher at work")
        holder = redis_client.get("t_revisit_pages:refresher").decode()
        (victim,) = [w for w in workers if holder.endswith(f":{w.proc.pid}")]
        os.kill(victim.proc.pid, signal.SIGKILL)
        victim.proc.wait()
        queued_before = redis_client.hlen("t_revisit_pages:revisits")
        held = {payload.split(b"\t", 2)[2] for payload in redis_client.hvals("t_revisit_pages:leases")
                if payload.startswith(holder.encode() + b"\t")}
        held_paths = {json.loads(p)["url"].removeprefix(shop.url) for p in held}
        wait_until(lambda: min(counts().values()) >= 2, 60, "every page fetched in the second cycle")
    finally:
        for worker in workers:
            worker.proc.terminate()
        for worker in workers:
            worker.wait(30)
    assert 1 <= queued_before < len(every), "killed mid-batch"
    twice = {path for path, n in counts().items() if n > 2}
    assert twice <= held_paths, "a page is fetched once per cycle; only a lease of the killed worker may be re-fetched"
    assert redis_client.hlen("t_revisit_pages:revisits") == len(every), "every due page queued (once)"


def test_a_status_record_moves_to_its_pages_fingerprint_when_the_fingerprinter_changed(env, site, redis_client,
                                                                                         mongo_db, tmp_path):
    """A page's status record is keyed by its request's fingerprint. When that fingerprint changes between two runs
    (an upgrade that reads tracking parameters out of it, URL_TRACKING_PARAMS edited, a project's own fingerprinter),
    the page is met under the new one (its link again: a new record) and the old record falls due: its revisit moves
    it to the new fingerprint, counts and first fetch carried on, merged with the new record. Else both stay, each
    due on its own: the page fetched twice as often as its schedule says, for good."""
    from urllib.parse import parse_qsl, urlencode, urlsplit

    pages = {"/": '<html><body><a href="/a/?utm_source=nav">a</a> <a href="/b/">b</a></body></html>',
             "/a/": "<html><head><title>A</title></head><body>a</body></html>",
             "/b/": "<html><head><title>B</title></head><body>b</body></html>"}

    def tracking_ignored(web, path):  # a real server answers a link with utm_* as the page
        parts = urlsplit(path)
        args = [(k, v) for k, v in parse_qsl(parts.query) if not k.startswith("utm_")]
        page = web.pages.get(f"{parts.path}?{urlencode(args)}" if args else parts.path)
        return (200, "text/html; charset=utf-8", page, {}) if isinstance(page, str) else page

    web = site(pages, handler=tracking_ignored)
    env = {**env, "SPIDER_MODULES": SPIDERS, "MAX_IDLE_TIME_BEFORE_CLOSE": "0", "REFRESH_INTERVAL": "0.3"}
    redis_client.lpush("t_revisit_pages:start_urls", f"{web.url}/")
    before = start_worker("t_revisit_pages", {**env, "URL_TRACKING_PARAMS": "[]"}, tmp_path, "before")
    try:
        wait_until(lambda: mongo_db.url_status.count_documents({}) == 3, 60, "the first fetch of each page")
    finally:
        before.proc.terminate()
        before.wait(30)
    first = {d["url"].removeprefix(web.url): d for d in mongo_db.url_status.find()}
    assert sorted(first) == ["/", "/a/?utm_source=nav", "/b/"]

    after = start_worker("t_revisit_pages", env, tmp_path, "after")  # its fingerprint reads utm_source out

    def settled():  # one record a page again, each fetched twice (the one that moved counted on)
        records = list(mongo_db.url_status.find())
        return len(records) == 3 and all(d.get("fetches", 0) >= 2 for d in records)

    try:
        wait_for(settled, 90, step=0.2)
    finally:
        after.proc.terminate()
        after.wait(30)
    records = {d["url"].removeprefix(web.url): d for d in mongo_db.url_status.find()}
    assert mongo_db.url_status.count_documents({}) == 3, [(d["url"], d["fp"][:6], d.get("fetches"), d.get("first_fetch"), d.get("last_fetch"), d.get("next_fetch")) for d in mongo_db.url_status.find()]
    for path, doc in records.items():
        assert doc["fetches"] >= 2 and doc["first_fetch"] == first[path]["first_fetch"], (path, doc)
    moved = records["/a/?utm_source=nav"]
    assert moved["fp"] != first["/a/?utm_source=nav"]["fp"]  # its fingerprint as read today: without utm_source
    assert records["/b/"]["_id"] == first["/b/"]["_id"] and records["/"]["_id"] == first["/"]["_id"]
    assert "The status record of" in after.log() and "moves to its fingerprint" in after.log()


def test_a_page_that_redirects_when_revisited_is_moved_or_removed_and_its_target_keeps_its_own_record(
        env, site, redis_client, mongo_db, tmp_path):
    """Between two visits a shop (https) moves a product to a new address (a 301 from the old one, which its listing
    still links) and removes another, whose address now redirects to the listing. The moved product is stored under
    its new address and its old document is marked gone; the removed one is marked gone; the listing, the target of
    the second redirect, keeps its own status record and callback (a product's callback on the listing would read
    nothing there, and the crawl would find no new product again); each old address keeps its record, with where it
    redirects to, checked again less and less often. A third product moves to an address whose new markup the
    spider does not read: judged broken there, its stored document is not marked gone, at the first check or the
    next. A fourth redirects to the listing for a while (a 302: out of stock, a maintenance page): nothing is
    marked, its record keeps its schedule, and it is back once the redirect goes. A fifth leaves for another host
    (a domain move, which same_host_only does not follow): said at WARNING, noted in its record, nothing marked."""

    def listing(*paths):
        return ('<html><head><title>Shop</title></head><body>'
                + "".join(f'<a class="item" href="{p}">{p}</a> ' for p in paths) + "</body></html>")

    def detail(name):
        return f'<html><head><title>{name} | Shop</title></head><body><h1 class="product">{name}</h1></body></html>'

    pages = {"/": listing("/item/1/", "/item/2/", "/item/3/", "/item/5/", "/item/6/"),
             "/item/1/": detail("One"), "/item/2/": detail("Two"), "/item/3/": detail("Three"),
             "/item/5/": detail("Five"), "/item/6/": detail("Six")}
    web = site(pages, tls=True, conditional=True)  # ETags: the moved page's, the same body, is the old one's
    env = {**env, "SPIDER_MODULES": SPIDERS, "MAX_IDLE_TIME_BEFORE_CLOSE": "0", "REFRESH_INTERVAL": "0.3"}
    redis_client.lpush("t_revisit_detail:start_urls", f"{web.url}/")
    worker = start_worker("t_revisit_detail", env, tmp_path, "w")

    def record(path):
        return mongo_db.url_status.find_one({"url": f"{web.url}{path}"}) or {}

    try:
        wait_until(lambda: mongo_db.pages.count_documents({}) == 5 and mongo_db.url_status.count_documents({}) == 6,
                   60, "the first visit of every page")
        first_five = mongo_db.pages.find_one({"title": "Five"})
        pages["/item/1/"] = (301, "text/html", "", {"Location": "/items/one/"})  # moved: the listing links the old one
        pages["/items/one/"] = detail("One")
        pages["/item/2/"] = (301, "text/html", "", {"Location": "/"})  # removed: its address leads to the listing
        pages["/item/3/"] = (301, "text/html", "", {"Location": "/items/three/"})  # moved, to a theme not read
        pages["/items/three/"] = '<html><body><h1 class="title">Three</h1></body></html>'
        pages["/item/5/"] = (302, "text/html", "", {"Location": "/"})  # for a while
        moved_host = web.url.replace("127.0.0.1", "localhost")  # the same server, under another host name
        pages["/item/6/"] = (301, "text/html", "", {"Location": f"{moved_host}/item/6/"})
        pages["/"] = listing("/item/1/", "/item/3/", "/item/5/", "/item/6/")
        wait_until(lambda: all(record(f"/item/{i}/").get("redirected_to") for i in (1, 2, 3, 5, 6)),
                   60, "the redirects met on a revisit")
        pages["/item/4/"] = detail("Four")  # a new product: found only if the listing is still read as a listing
        pages["/item/5/"] = detail("Five")  # back
        pages["/"] = listing("/item/1/", "/item/3/", "/item/4/", "/item/5/", "/item/6/")
        wait_until(lambda: mongo_db.pages.find_one({"title": "Four"}), 60, "the new product found on the listing")
        wait_until(lambda: record("/item/1/").get("fetches", 0) >= 3 and record("/item/3/").get("fetches", 0) >= 3
                   and record("/").get("fetches", 0) >= 4 and record("/item/5/").get("last_status") == 304,
                   60, "the old addresses checked again, the listing, and the page that came back")
    finally:
        worker.proc.terminate()
        worker.wait(30)
    docs = {d["url"].removeprefix(web.url): d for d in mongo_db.pages.find()}
    assert sorted(docs) == ["/item/1/", "/item/2/", "/item/3/", "/item/4/", "/item/5/", "/item/6/", "/items/one/"]
    live = sorted(d["title"] for d in docs.values() if not d.get("gone_at"))
    assert live == ["Five", "Four", "One", "Six", "Three"], live  # one live document a product, at its address of today
    assert docs["/item/1/"]["gone_at"] and docs["/item/2/"]["gone_at"]
    assert docs["/items/one/"]["title"] == "One" and not docs["/items/one/"].get("gone_at")

    listing_record = record("/")
    assert json.loads(listing_record["request"]).get("callback") in (None, "parse"), listing_record["request"]
    assert listing_record["url"] == f"{web.url}/" and not listing_record.get("redirected_to")
    for path, to in (("/item/1/", "/items/one/"), ("/item/2/", "/")):
        old = record(path)
        assert old["redirected_to"] == f"{web.url}{to}" and old["last_status"] == 301, old
        # checked again less and less often: 3 s x 1.2 a redirect met (revisit_max: 6 s)
        assert round(old["interval"], 6) == round(min(6.0, 3.0 * 1.2 ** (old["fetches"] - 1)), 6), old
        assert "etag" not in old and "signature" not in old, old  # the old body's: a whole GET next
        assert json.loads(old["request"])["url"] == f"{web.url}{path}"  # its record still asks its own address
    first_at_new = next(h for h in web.hits if h.path == "/items/one/")
    assert first_at_new.status == 200 and "If-None-Match" not in dict(first_at_new.headers)  # the old page's ETag
    moved = record("/items/one/")
    assert moved and json.loads(moved["request"]).get("callback") == "parse_item", moved
    assert mongo_db.url_status.count_documents({}) == 9  # "/", the six items, the two new addresses
    left = record("/item/6/")  # off the seed's host: not followed, nothing marked, its schedule kept
    assert left["redirected_to"] == f"{moved_host}/item/6/" and left["interval"] == 3.0 and left["etag"], left
    assert not moved_host.startswith(web.url) and not [h for h in web.hits if h.path == "/item/6/" and
                                                        dict(h.headers).get("Host", "").startswith("localhost")]
    back = record("/item/5/")  # a temporary redirect: the same schedule and validators (back: a 304), no mark
    assert back["last_status"] == 304 and not back.get("redirected_to") and back["etag"], back
    assert round(back["interval"], 6) == round(min(6.0, 3.0 * 1.2 ** back["unchanged"]), 6), back  # 304s alone
    five = mongo_db.pages.find_one({"title": "Five"})
    assert five["_id"] == first_five["_id"] and not five.get("gone_at")
    assert not docs["/item/3/"].get("gone_at")  # its new markup unread: nothing says it went
    assert record("/items/three/")["broken"] and record("/item/3/")["redirected_to"] == f"{web.url}/items/three/"
    log = worker.log()
    assert f"{web.url}/item/1/ now redirects to {web.url}/items/one/" in log, log[-3000:]
    assert f"{web.url}/item/2/ now redirects to {web.url}/, a page this crawl fetches under its own request" in log
    assert f"{web.url}/item/5/ redirects for now (302) to {web.url}/, a page this crawl fetches under its own" in log
    schedule = cli(env, "schedule", "t_revisit_detail")
    assert "4 page(s) redirected elsewhere at their last fetch" in schedule.stdout, schedule.stdout  # 1, 2, 3, 6
    assert f"{web.url}/item/6/, a page this crawl revisits, now redirects off the seed's host to {moved_host}" in log


def test_a_status_store_that_cannot_be_read_takes_a_redirect_as_the_pages_new_address(caplog):
    from scrapy import Spider
    from scrapy.utils.test import get_crawler

    from crawlhub.downloadermiddlewares.revisit import RevisitMiddleware
    from tests.helpers import project_settings
    from tests.sites.server import refused_port

    crawler = get_crawler(Spider, settings_dict=project_settings(
        MONGO_URI=f"mongodb://crawler:s3cret-pw@127.0.0.1:{refused_port()}/", MONGO_SERVER_SELECTION_TIMEOUT_MS=300))
    middleware = RevisitMiddleware(crawler)
    middleware.spider_name = "shop"
    assert middleware._record_state(middleware._status_store(), "ab" * 20) is None
    assert "Could not read the status store" in caplog.text and "taken as its page's new address" in caplog.text
    assert "s3cret-pw" not in caplog.text
    middleware.spider_closed(crawler.spider)


def test_a_product_removed_from_a_listing_is_the_only_one_marked_gone_though_the_rest_shift_pages(
        env, site, redis_client, mongo_db, tmp_path):
    """A shop removes one product from its first listing page: every product after it moves up one place, and one
    from each page onto the page before, with its content unchanged. Once every page has been revisited, exactly the
    removed product is marked gone, and each of the others names the page it is on now (its source_url). Before, a
    product whose content had not changed kept the source_url of the page it left, and that page's revisit marked
    it gone (its last_seen older than that fetch), until the page it moved to came round again."""
    pages = shop_pages(24, 4)  # /shop/ and /shop/page/2/ .. /shop/page/6/, 4 products a page
    shop = site(pages, tls=True, conditional=True)
    # a pace, so that a cycle fetches the pages one after the other, in the order they were found
    env = {**env, "SPIDER_MODULES": SPIDERS, "MAX_IDLE_TIME_BEFORE_CLOSE": "0", "REFRESH_INTERVAL": "0.3",
           "DOMAIN_RATE": "4/s"}
    redis_client.lpush("t_revisit:start_urls", f"{shop.url}/shop/")
    worker = start_worker("t_revisit", env, tmp_path, "w")

    def fetched_twice() -> bool:
        records = list(mongo_db.url_status.find({"spider": "t_revisit"}))
        return len(records) == 6 and all(d.get("fetches", 0) >= 2 for d in records)

    try:
        wait_until(lambda: mongo_db.products.count_documents({}) == 24 and mongo_db.url_status.count_documents({}) == 6,
                   60, "the first cycle stored")
        pages.update(shop_pages(24, 4, without={"700"}))  # the first product removed: the rest shift up
        wait_until(fetched_twice, 60, "every page revisited, its news stored")
    finally:
        worker.proc.terminate()
        worker.wait(30)
    def placement(listing: dict) -> dict:
        return {product_id: path for path, body in listing.items()
                for product_id in re.findall(r'data-product_id="(\d+)"', body)}

    before, where = placement(shop_pages(24, 4)), placement(shop_pages(24, 4, without={"700"}))
    assert sorted(i for i in where if where[i] != before[i]) == ["704", "708", "712", "716", "720"]  # a page up
    docs = {d["id"]: d for d in mongo_db.products.find()}
    assert sorted(d for d, doc in docs.items() if doc.get("gone_at")) == ["700"], "the removed product alone is gone"
    wrong = {i: d["source_url"].removeprefix(shop.url) for i, d in docs.items() if i != "700"
             and d["source_url"] != f"{shop.url}{where[i]}"}
    assert wrong == {}, f"products not named by the page they are on now: {wrong}"


def test_with_a_gone_delay_a_product_shifted_to_a_page_not_yet_revisited_is_never_marked_gone(
        env, site, redis_client, mongo_db, tmp_path):
    """A shop adds a product at the front of its listing (newest first) and removes one further on: the last product
    of each page before the removal moves to the next page (704 and 708). The revisit of page 1 no longer shows 704, which is on
    page 2 now; page 2's revisit is held back until that check is written. With REVISIT_GONE_DELAY the product only
    waits (missing_since, gone_due) and page 2's revisit takes that back; at 0 (the default) it was marked gone until
    then, and an export taken meanwhile left it out. The removed product is marked gone once its wait is over, by a
    worker started after the one that found it missing was killed (kill -9): the wait is in MongoDB, not in a worker."""
    listing = {"/shop/", *(f"/shop/page/{n}/" for n in range(2, 7))}
    pages = shop_pages(25, 4, without={"700"})  # 701..724: /shop/ and /shop/page/2/ .. /shop/page/6/
    changed, released = threading.Event(), threading.Event()

    def hold_page_two(site_, path):  # page 2's revisit after the change waits until the test has looked
        if path == "/shop/page/2/" and changed.is_set():
            released.wait(90)  # (the test's looks take seconds each on a loaded machine; DOWNLOAD_TIMEOUT 120 below)
        return None

    shop = site(pages, tls=True, conditional=True, handler=hold_page_two)
    env = {**env, "SPIDER_MODULES": SPIDERS, "MAX_IDLE_TIME_BEFORE_CLOSE": "0", "REFRESH_INTERVAL": "0.3",
           "DOMAIN_RATE": "4/s", "REVISIT_GONE_DELAY": "20", "LEASE_TTL": "3", "LEASE_RECLAIM_INTERVAL": "1",
           "DOWNLOAD_TIMEOUT": "120"}
    redis_client.lpush("t_revisit:start_urls", f"{shop.url}/shop/")
    workers = [start_worker("t_revisit", env, tmp_path, "w1")]

    def doc(product_id: str) -> dict:
        return mongo_db.products.find_one({"id": product_id}) or {}

    def fetches(path: str) -> int:
        record = mongo_db.url_status.find_one({"spider": "t_revisit", "url": shop.url + path}) or {}
        return record.get("fetches", 0)

    try:
        wait_until(lambda: mongo_db.products.count_documents({}) == 24 and mongo_db.url_status.count_documents({}) == 6,
                   60, "the first cycle stored")
        assert doc("704")["source_url"] == f"{shop.url}/shop/"
        changed.set()
        pages.clear()
        pages.update(shop_pages(25, 4, without={"710"}))  # 700 added at the front, 710 removed from page 3
        wait_until(lambda: fetches("/shop/") >= 2 and {"missing_since", "gone_at"} & set(doc("704")), 60,
                   "page 1 revisited, and 704 (moved to page 2, held back) found missing there")
        waiting = doc("704")
        assert waiting.get("gone_at") is None, "a product moved to a page not yet revisited is not marked gone"
        assert waiting["gone_due"] > waiting["missing_since"]
        # looked at in-process but for one command: the looks must end within the wait (a command takes seconds
        # on a loaded machine), else 704 is rightly marked gone, its page held back longer than REVISIT_GONE_DELAY
        out = io.BytesIO()
        export(mongo_db, plan(mongo_db, "t_revisit"), "jsonl", out)
        assert "704" in [json.loads(line)["id"] for line in out.getvalue().splitlines()], "an export meanwhile has it"
        schedule = StatusStore(mongo_db.url_status).schedule("t_revisit")
        assert schedule["missing"] >= 1 and schedule["missing_gone_from"], schedule
        assert "missing from their pages' last revisits wait" in cli(env, "schedule", "t_revisit").stdout
        assert doc("704").get("gone_due"), "still waiting: the looks ended within the wait"
        released.set()
        wait_until(lambda: doc("704").get("source_url") == f"{shop.url}/shop/page/2/", 30, "page 2 revisited")
        assert not {"missing_since", "gone_due", "gone_at"} & set(doc("704")), "seen on page 2: no longer missing"
        wait_until(lambda: doc("710").get("missing_since"), 30, "page 3 revisited, 710 missing")
        workers[0].proc.kill()  # kill -9: the worker that found 710 missing never marks it
        workers[0].proc.wait()
        workers.append(start_worker("t_revisit", env, tmp_path, "w2"))
        wait_until(lambda: doc("710").get("gone_at"), 60, "the removed product marked gone once its wait was over")
        wait_until(lambda: all(fetches(path) >= 2 for path in listing), 60, "every page revisited")
    finally:
        released.set()
        for worker in workers:
            if worker.proc.poll() is None:
                worker.proc.terminate()
        for worker in workers:
            worker.wait(30)
    docs = {d["id"]: d for d in mongo_db.products.find()}
    assert sorted(docs) == [str(i) for i in range(700, 725)], "the added product is stored"
    assert sorted(d for d, doc_ in docs.items() if doc_.get("gone_at")) == ["710"], "the removed product alone is gone"
    gone = docs["710"]
    assert gone["missing_since"] < gone["gone_at"] and "gone_due" not in gone
    assert gone["gone_at"] - gone["missing_since"] >= timedelta(seconds=20 - 0.5), "it waited REVISIT_GONE_DELAY"
    assert not [d for d, doc_ in docs.items() if d != "710" and ({"missing_since", "gone_due"} & set(doc_))], \
        "every moved product was seen again on the page it moved to"
    assert "Traceback" not in "".join(w.log() for w in workers)
