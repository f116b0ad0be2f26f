"""Data quality (#27): a broken extraction is noticed and never damages what is stored.

Real workers revisit a local shop; the shop then changes its markup on some pages (same products, a theme that
renames ``li.product``), reverts, and really removes products: the store keeps everything the broken pages
cannot see, the event names the pages, and real removals are still marked."""


from __future__ import annotations

import json

from tests.harness import cli, http, start_ui, start_worker, wait_all, wait_for
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
