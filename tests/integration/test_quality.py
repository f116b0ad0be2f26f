"""Data quality (#27): a broken extraction is noticed and never damages what is stored.

Real workers revisit a local shop; the shop then changes its markup on some pages (same products, a theme that
renames ``li.product``), reverts, and really removes products: the store keeps everything the broken pages
cannot see, the event names the pages, and real removals are still marked."""


from __future__ import annotations

import json

from tests.harness import cli, http, run_workers, start_ui, start_worker, wait_all, wait_for
from tests.sites.shop import shop_pages

SPIDERS = "spiders,tests.sites.spiders"


def snapshot(mongo_db) -> dict:
    """Each product's stored fields, without what moves on every store."""
    return {d["id"]: {k: v for k, v in d.items() if k not in ("last_seen", "scraped_at", "cycles")}
            for d in mongo_db.products.find()}


def quality(env) -> tuple[int, dict]:
    done = cli(env, "quality", "t_revisit", "--json")
    return done.returncode, json.loads(done.stdout or "{}")


def test_a_theme_change_marks_nothing_gone_overwrites_nothing_and_is_named(env, site, redis_client, mongo_db, tmp_path,
                                                                         webhook):
    pages = shop_pages(48, 8)  # /shop/ and /shop/page/2/ .. /shop/page/6/, 8 products each
    original = dict(pages)
    shop = site(pages, conditional=True, tls=True)
    env = {**env, "SPIDER_MODULES": SPIDERS, "MAX_IDLE_TIME_BEFORE_CLOSE": "0", "REFRESH_INTERVAL": "0.3",
           "QUALITY_FLUSH_INTERVAL": "0.5", "QUALITY_WEBHOOK_URL": webhook.url}
    redis_client.lpush("t_revisit:start_urls", f"{shop.url}/shop/")
    workers = [start_worker("t_revisit", env, tmp_path, f"w{i}") for i in range(2)]
    assert wait_for(lambda: mongo_db.products.count_documents({}) == 48
                    and mongo_db.url_status.count_documents({"items": 8}) == 6, 60), "the first cycle stored"
    before = snapshot(mongo_db)
    assert quality(env)[0] == 0

    # a new theme on two listing pages: the same products, `li.product` renamed
    themed = ["/shop/page/2/", "/shop/page/3/"]
    for path in themed:
        pages[path] = pages[path].replace(" product type-product", " entry type-product")
    code, report = wait_for(lambda: (lambda r: r if r[0] == 4 and len(r[1]["broken"]) == 2 else None)(quality(env)), 30) \
        or quality(env)
    assert code == 4, f"`crawlhub quality` exits 4 while the extraction is broken: {report}"
    (event,) = report["events"]
    assert event["pattern"].endswith("/shop/page/*/") and "none now" in event["why"], event
    assert sorted(b["url"] for b in report["broken"]) == [shop.url + p for p in themed]
    assert all(b["why"] == "yielded 8 item(s) at its last healthy fetch, none now" for b in report["broken"])
    # fetched again meanwhile (they stay due), still broken: nothing gone, nothing overwritten
    assert wait_for(lambda: all(len([h for h in shop.hits if h.path == p]) >= 3 for p in themed), 30)
    assert mongo_db.products.count_documents({"gone_at": {"$ne": None}}) == 0, "no product of the themed pages is gone"
    assert snapshot(mongo_db) == before, "no stored field moved"
    judged = max(b["since"] for b in report["broken"]) + 1.5  # (its status written with the store's next flush)
    assert wait_for(lambda: [h for h in shop.hits if h.path in themed and h.arrived > judged], 30), "fetched again"
    later = [h for h in shop.hits if h.path in themed and h.arrived > judged]
    assert later and all("If-None-Match" not in dict(h.headers) for h in later), \
        "a broken page is fetched whole (a fixed spider parses it again)"
    text = cli(env, "quality", "t_revisit", "--broken").stdout
    assert "BROKEN since" in text and all(shop.url + p in text for p in themed)
    logs = "".join(w.log() for w in workers)
    assert logs.count("Extraction broken on pages like") == 1, "one line for the event, in the worker that opened it"
    # the webhook got it once (its first POST was answered 503: tried again), and no secret went to a log
    assert wait_for(lambda: [e for e in webhook.events() if e["state"] == "opened"], 15), webhook.bodies
    (posted,) = [e for e in webhook.events() if e["state"] == "opened"]
    assert posted["kind"] == "extraction" and posted["pattern"] == event["pattern"] and posted["spider"] == "t_revisit"
    assert webhook.attempts >= 2 and webhook.url not in logs

    # the theme goes away: the event closes, nothing was lost
    for path in themed:
        pages[path] = original[path]
    assert wait_for(lambda: quality(env)[0] == 0, 30), quality(env)
    code, report = quality(env)
    assert report["broken"] == [] and report["closed"][0]["pattern"] == event["pattern"]
    assert wait_for(lambda: [e for e in webhook.events() if e["state"] == "closed"], 15), "the webhook hears it closed"
    assert mongo_db.products.count_documents({"gone_at": {"$ne": None}}) == 0
    assert set(snapshot(mongo_db)) == set(before)

    # real removals still work: a product removed from a healthy page, and a page that now answers 404
    pages["/shop/page/4/"] = pages["/shop/page/4/"].replace('data-product_id="724"', 'data-product_id="999"')
    gone_page = [d["id"] for d in mongo_db.products.find({"source_url": f"{shop.url}/shop/page/6/"})]
    del pages["/shop/page/6/"]
    assert wait_for(lambda: mongo_db.products.count_documents({"gone_at": {"$ne": None}}) == 1 + len(gone_page), 30), \
        sorted(d["id"] for d in mongo_db.products.find({"gone_at": {"$ne": None}}))
    assert {d["id"] for d in mongo_db.products.find({"gone_at": {"$ne": None}})} == {"724", *gone_page}
    assert quality(env)[0] == 0, "a removal is not a breakage"
    for worker in workers:
        worker.proc.terminate()
    wait_all(workers, 60)
    assert "Traceback" not in "".join(w.log() for w in workers)


def test_a_broken_pages_status_keeps_its_baseline_and_drops_its_validators(mongo_db):
    from crawlhub.revisit.store import StatusStore, StatusUpdate

    store = StatusStore(mongo_db.url_status)

    def update(**kw):
        base = {"spider": "s", "fp": "f", "url": "http://127.0.0.1/p", "domain": "127.0.0.1", "request": "{}",
                "fetched_at": 100.0, "status": 200, "etag": '"e1"', "last_modified": None, "signature": "sig",
                "interval": 60.0, "changed": None}
        return StatusUpdate(**{**base, **kw})

    store.write([update(items=16)])
    store.write([update(etag='"e2"', signature="sig2", interval=72.0, broken="yielded 16 item(s) ..., none now",
                        fetched_at=200.0)])
    doc = mongo_db.url_status.find_one()
    assert doc["items"] == 16 and doc["broken"] and "etag" not in doc and "signature" not in doc
    assert doc["next_fetch"] == 272.0
    store.write([update(items=16, fetched_at=300.0)])
    doc = mongo_db.url_status.find_one()
    assert "broken" not in doc and doc["etag"] == '"e1"' and doc["items"] == 16


def stored_prices(mongo_db) -> dict:
    return {d["id"]: d.get("price") for d in mongo_db.products.find()}


def test_a_price_selector_broken_on_some_items_opens_a_coverage_event_and_keeps_stored_prices(
        env, site, redis_client, mongo_db, tmp_path, webhook):
    pages = shop_pages(48, 8)
    original = dict(pages)
    shop = site(pages, conditional=True)
    env = {**env, "SPIDER_MODULES": SPIDERS, "MAX_IDLE_TIME_BEFORE_CLOSE": "0", "REFRESH_INTERVAL": "0.3",
           "QUALITY_FLUSH_INTERVAL": "0.5", "QUALITY_CHECK_INTERVAL": "0.5", "QUALITY_WINDOW": "3",
           "QUALITY_MIN_ITEMS": "10", "QUALITY_WEBHOOK_URL": webhook.url}
    redis_client.lpush("t_revisit:start_urls", f"{shop.url}/shop/")
    workers = [start_worker("t_revisit", env, tmp_path, f"w{i}") for i in range(2)]
    assert wait_for(lambda: mongo_db.products.count_documents({}) == 48, 60), "the first cycle stored"
    prices = stored_prices(mongo_db)
    assert all(prices.values()) and quality(env)[0] == 0

    # the price markup changes on three pages: their 24 products show no price the selector finds
    for path in ("/shop/page/2/", "/shop/page/3/", "/shop/page/4/"):
        pages[path] = pages[path].replace('class="woocommerce-Price-amount amount"', 'class="amount-v2"')
    def coverage_event():
        code, report = quality(env)
        return [e for e in report.get("events", ()) if e.get("subject") == "Product.price"] if code == 4 else None
    assert wait_for(coverage_event, 40), quality(env)
    (event,) = coverage_event()
    assert event["kind"] == "coverage" and "floor is 90%" in event["why"], event
    # (the webhook posts from a thread after the event is recorded, so it may land a moment after status shows it)
    assert wait_for(lambda: any(e["subject"] == "Product.price" for e in webhook.events() if e["state"] == "opened"),
                    10), webhook.events()
    assert any(e["subject"] == "Product.price" for e in webhook.events() if e["state"] == "opened")
    # (the event opens once the share falls under the floor, which one changed page of the three can do: the
    # figures asserted are those of a report read once all three were fetched again in its cycle)
    read: dict = {}

    def all_three_fetched() -> bool:
        read["report"] = quality(env)[1]
        return read["report"]["figures"]["quarantined_by_reason"].get("price missing", 0) >= 24

    wait_for(all_three_fetched, 30)
    report = read["report"]
    assert report["figures"]["coverage"]["Product.price"]["share"] < 0.9 and report["score"] < 100
    assert report["figures"]["quarantined_by_reason"].get("price missing", 0) >= 24
    assert mongo_db.quarantine.find_one({"reasons": "missing price"})["fields"]["price"] == ["missing price"]
    assert stored_prices(mongo_db) == prices, "no stored price was emptied"
    assert mongo_db.products.count_documents({"gone_at": {"$ne": None}}) == 0
    # status, the UI's data and the HTML report say so too
    status = cli(env, "status", "t_revisit").stdout
    assert "quality: score" in status and "!! Product.price coverage below its floor" in status, status
    ui, url = start_ui(env, tmp_path)
    shown = json.loads(http(f"{url}/api/spiders/t_revisit/status")[2])["quality"]
    assert [e["subject"] for e in shown["events"]].count("Product.price") == 1 and shown["coverage"]["Product.price"]
    ui.proc.terminate()
    assert cli(env, "report", "t_revisit", "--html", str(tmp_path / "r.html")).returncode == 0
    page = (tmp_path / "r.html").read_text()
    assert 'id="quality"' in page and "Product.price coverage below its floor" in page

    # the markup comes back: the recent figures are healthy again, the event closes
    pages.update(original)
    assert wait_for(lambda: not coverage_event() and quality(env)[0] == 0, 40), quality(env)
    assert stored_prices(mongo_db) == prices

    # a price that falls by more than Product.price's declared alert share (half) raises a change alert
    cut = next(iter(prices))
    new_price = f"{float(prices[cut]) * 0.3:.2f}"
    for path, body in pages.items():  # the price inside product `cut`'s own <li>
        start = body.find(f'<li class="post-{cut} ')
        if start >= 0:
            end = body.index("</li>", start)
            pages[path] = body[:start] + body[start:end].replace(f"</span>{prices[cut]}</span>",
                                                                 f"</span>{new_price}</span>") + body[end:]
    assert wait_for(lambda: quality(env)[1].get("alerts"), 30), "a change alert"
    (alert,) = quality(env)[1]["alerts"]
    assert alert["subject"] == "products.price" and alert["old"] == prices[cut] and alert["new"] == new_price, alert
    assert wait_for(lambda: [e for e in webhook.events() if e["state"] == "alert"], 15), webhook.bodies
    assert quality(env)[0] == 0, "a change alert is news, not an open event"
    for worker in workers:
        worker.proc.terminate()
    wait_all(workers, 60)
    assert "Traceback" not in "".join(w.log() for w in workers)


def test_quotes_and_quotes_js_fill_one_collection_and_no_author_url_goes_wrong(
        env, site, redis_client, mongo_db, tmp_path, chromium):
    from tests.harness import run_workers
    from tests.sites.quotes import quote_pages, quote_pages_js, render_handler

    # as on quotes.toscrape.com: the plain pages link each author, the /js/ pages do not
    shop = site({**quote_pages(2, 4), **quote_pages_js(2, 4, author_links=False)}, handler=render_handler)
    redis_client.lpush("quotes:start_urls", f"{shop.url}/")
    run_workers("quotes", env, tmp_path / "a", 1)
    before = {d["quote_id"]: d["author_url"] for d in mongo_db.quotes.find()}
    assert len(before) == 8 and all(url.startswith(f"{shop.url}/author/") for url in before.values())
    redis_client.lpush("quotes_js:start_urls", f"{shop.url}/js/")
    run_workers("quotes_js", env, tmp_path / "b", 1, timeout=180)
    after = {d["quote_id"]: d for d in mongo_db.quotes.find()}
    assert {k: d["author_url"] for k, d in after.items()} == before, "the /js/ pages' missing link changed nothing"
    assert all(set(d["spiders"]) == {"quotes", "quotes_js"} for d in after.values()), "both spiders stored them all"
    assert mongo_db.changes.count_documents({"field": "author_url"}) == 0, "no change recorded for author_url"


def test_quarantined_items_are_listed_by_reason_and_their_pages_crawled_again_once_the_site_is_fixed(
        env, site, redis_client, mongo_db, tmp_path):
    """A one-shot crawl (no revisits) of an https shop whose price markup is broken on two of its pages quarantines
    those pages' products. `crawlhub quarantine` names them with their reasons; once the site is fixed, `requeue`
    crawls each of those pages once more (never filtered as seen), the products are stored with their prices and the
    records go; the pages that were fine are not fetched again, and `purge` clears what is left."""
    pages = shop_pages(48, 8)  # 6 listing pages of 8 products
    original = dict(pages)
    for path in ("/shop/page/2/", "/shop/page/5/"):
        pages[path] = pages[path].replace('class="woocommerce-Price-amount amount"', 'class="amount-v2"')
    shop = site(pages, tls=True)
    env = {**env, "MAX_IDLE_TIME_BEFORE_CLOSE": "2"}
    redis_client.lpush("scrapeme:start_urls", f"{shop.url}/shop/")
    run_workers("scrapeme", env, tmp_path, 2)
    assert mongo_db.products.count_documents({}) == 32 and mongo_db.quarantine.count_documents({}) == 16

    listed = cli(env, "quarantine", "list", "scrapeme", "--limit", "3")
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert len(lines) == 4 and lines[-1].startswith("16 quarantined item(s) of scrapeme; by reason: missing "), lines
    assert "missing price 16" in lines[-1] and "missing currency 16" in lines[-1], lines
    assert all("Product" in line and "/shop/page/" in line and "missing price" in line for line in lines[:3]), lines
    data = json.loads(cli(env, "quarantine", "list", "scrapeme", "--json", "--reason", "PRICE").stdout)
    assert data["total"] == 16 and len(data["records"]) == 16
    assert data["by_reason"] == {"missing price": 16, "missing currency": 16}, "every reason of those records"
    assert cli(env, "quarantine", "list", "scrapeme", "--reason", "missing name").stdout.startswith(
        "0 quarantined item(s) of scrapeme with a reason containing 'missing name'")
    one = data["records"][0]
    assert one["page"] == one["source_url"] and one["lease"], "the page as leased, and the fetch's lease"
    shown = json.loads(cli(env, "quarantine", "show", "scrapeme", one["_id"]).stdout)
    assert shown["request"]["url"] == one["source_url"] and shown["request"]["dont_filter"] is True, shown
    assert shown["fields"] == {"price": ["missing price"], "currency": ["missing currency"]} and shown["item"]["id"]

    # the web UI's list (the "quarantined" card opens it)
    ui, url = start_ui(env, tmp_path)
    code, _, body = http(f"{url}/api/spiders/scrapeme/quarantine")
    listing = json.loads(body)
    assert code == 200 and listing["total"] == 16 and len(listing["entries"]) == 16, body[:500]
    assert {e["id"] for e in listing["entries"]} == {r["_id"] for r in data["records"]}
    assert all(e["requeueable"] and e["reasons"] == ["missing price", "missing currency"] for e in listing["entries"])
    change = {"X-Crawlhub": "1"}
    code, _, body = http(f"{url}/api/spiders/scrapeme/quarantine/requeue", {"ids": [one["_id"], "0" * 24]}, change)
    assert code == 200 and json.loads(body)["missing"] == ["0" * 24] and json.loads(body)["requeued"] == 0, body
    assert mongo_db.quarantine.count_documents({}) == 16, "an id that is not its record: nothing done"
    ui.proc.terminate()

    # bad input: said, exit 2 (1: no such record, as `dlq`), nothing done
    for args, code in ((("requeue", "scrapeme"), 2), (("show", "scrapeme", "not-an-id"), 2),
                       (("requeue", "scrapeme", one["_id"], "0" * 24), 1), (("show", "scrapeme", "0" * 24), 1)):
        done = cli(env, "quarantine", *args)
        assert done.returncode == code and "Traceback" not in done.stderr and done.stderr, (args, done.stderr)
    assert mongo_db.quarantine.count_documents({}) == 16

    pages.update(original)  # the site is fixed
    fetched_before = len(shop.hits)
    done = cli(env, "quarantine", "requeue", "scrapeme", "--reason", "price")
    assert done.returncode == 0 and "2 page(s) queued again for 16 quarantined item(s)" in done.stdout, done
    run_workers("scrapeme", env, tmp_path, 1)
    assert mongo_db.products.count_documents({}) == 48
    assert all(doc["price"] for doc in mongo_db.products.find()), "stored with their prices"
    assert mongo_db.quarantine.count_documents({}) == 0
    again = sorted(hit.path for hit in shop.hits[fetched_before:] if hit.path != "/robots.txt")
    assert again == ["/shop/page/2/", "/shop/page/5/"], again

    mongo_db.quarantine.insert_many([{"spider": "scrapeme", "reasons": ["missing name"]},
                                     {"spider": "other", "reasons": ["missing name"]}])
    assert "deleted 1 quarantine record(s)" in cli(env, "quarantine", "purge", "scrapeme", "--yes").stdout
    assert mongo_db.quarantine.count_documents({}) == 1, "another spider's records are its own"


def test_a_page_with_quarantined_items_is_read_whole_at_its_next_fetch_so_a_fixed_spider_stores_them(
        env, site, redis_client, mongo_db, tmp_path):
    """A revisited page that the site answers 304 to while it has not changed: if some of its items were quarantined,
    they are not in the store, and a fix on the spider's side (here: DEFAULT_CURRENCY for prices shown without a
    currency) must get them stored. Its validators go with the quarantine, as a broken page's do: its next fetch is a
    whole GET, parsed by the fixed spider; with them it would answer 304 for as long as the site stays the same.
    The quarantine holds the page's latest extraction: one record per item however often the page is read, and none
    once it reads healthy."""
    pages = shop_pages(24, 8)
    pages["/shop/page/2/"] = pages["/shop/page/2/"].replace(
        '<span class="woocommerce-Price-currencySymbol">&pound;</span>', "")
    shop = site(pages, conditional=True, tls=True)
    env = {**env, "SPIDER_MODULES": SPIDERS, "MAX_IDLE_TIME_BEFORE_CLOSE": "0", "REFRESH_INTERVAL": "0.3"}
    redis_client.lpush("t_revisit:start_urls", f"{shop.url}/shop/")
    first = start_worker("t_revisit", env, tmp_path, "before-the-fix")
    assert wait_for(lambda: mongo_db.products.count_documents({}) == 16
                    and mongo_db.quarantine.count_documents({"reasons": "missing currency"}) >= 8, 60)
    page_two = f"{shop.url}/shop/page/2/"
    assert wait_for(lambda: mongo_db.url_status.find_one({"url": page_two, "fetches": {"$gte": 3}}), 30), \
        "page 2 read three times"
    status = mongo_db.url_status.find_one({"url": page_two})
    assert not {"etag", "last_modified", "signature"} & set(status) and status.get("degraded"), status
    assert mongo_db.url_status.find_one({"url": f"{shop.url}/shop/page/3/"}).get("etag"), "a healthy page keeps its own"
    assert [hit.status for hit in shop.hits if hit.path == "/shop/page/2/"].count(304) == 0
    assert wait_for(lambda: mongo_db.quarantine.count_documents({}) == 8, 10), \
        "each read of the page supersedes the records of the one before"
    first.proc.terminate()
    wait_all([first], 60)
    assert mongo_db.quarantine.count_documents({}) == 8

    fixed = start_worker("t_revisit", {**env, "DEFAULT_CURRENCY": "GBP"}, tmp_path, "after-the-fix")
    assert wait_for(lambda: mongo_db.products.count_documents({}) == 24, 40), \
        "the page's next fetch was read whole, its products stored"
    assert {doc["currency"] for doc in mongo_db.products.find()} == {"GBP"}
    assert wait_for(lambda: mongo_db.quarantine.count_documents({}) == 0, 20), "read healthy: no record of it is left"
    assert wait_for(lambda: not mongo_db.url_status.find_one({"url": page_two}).get("degraded")
                    and mongo_db.url_status.find_one({"url": page_two}).get("etag"), 20), "its validators again"
    fixed.proc.terminate()
    wait_all([fixed], 60)
