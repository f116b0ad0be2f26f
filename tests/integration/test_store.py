"""Integration: what ends up in MongoDB, through real `scrapy crawl` processes."""

from __future__ import annotations

import json

from tests.harness import cli, run_workers
from tests.sites.quotes import quote_pages
from tests.sites.shop import product_price, shop_pages


def test_recrawl_refreshes_last_seen_and_rewrites_only_what_changed(env, site, redis_client, mongo_db, tmp_path):
    pages = shop_pages(48, 8)
    shop = site(pages)
    # one product shows no price: it must be quarantined with the reason, not dropped
    page3 = pages["/shop/page/3/"]
    start = page3.index('<span class="price">', page3.index("post-717 product"))
    pages["/shop/page/3/"] = page3[:start] + page3[page3.index("</span></span>", start) + 14 :]
    redis_client.lpush("scrapeme:start_urls", f"{shop.url}/shop/")
    run_workers("scrapeme", env, tmp_path, 1)

    first = {d["id"]: d for d in mongo_db.products.find()}
    assert len(first) == 47
    (bad,) = list(mongo_db.quarantine.find())
    assert bad["reasons"] == ["missing price", "missing currency"]
    assert bad["item"]["id"] == "717" and bad["source_url"] == f"{shop.url}/shop/page/3/"
    index = mongo_db.products.index_information()["item_key"]
    assert index["unique"] and [k for k, _ in index["key"]] == ["site", "id"]

    # the shop changes one price; the crawl is reset and run again
    pages["/shop/page/2/"] = pages["/shop/page/2/"].replace(f"</span>{product_price(10)}</span>", "</span>21.00</span>")
    assert cli(env, "reset", "scrapeme", "--yes").returncode == 0
    redis_client.lpush("scrapeme:start_urls", f"{shop.url}/shop/")
    (worker,) = run_workers("scrapeme", env, tmp_path, 1)

    second = {d["id"]: d for d in mongo_db.products.find()}
    assert set(second) == set(first)
    changed = [i for i in second if second[i]["content_hash"] != first[i]["content_hash"]]
    assert changed == ["710"] and second["710"]["price"] == "21.00"
    for i, doc in second.items():
        assert doc["first_seen"] == first[i]["first_seen"]
        assert doc["last_seen"] > first[i]["last_seen"]
        assert doc["_id"] == first[i]["_id"]
    assert "'mongo/unchanged': 46" in worker.log() and "'mongo/updated': 1" in worker.log()


def test_undecodable_queue_payloads_are_set_aside_not_run(env, site, redis_client, mongo_db, tmp_path):
    shop = site(shop_pages(16, 8))
    marker = tmp_path / "pwned"
    import pickle

    class Exploit:
        def __reduce__(self):
            return (open, (str(marker), "w"))

    # queued by hand, the way the frontier queues (docs/redis-keys.md)
    redis_client.zadd("scrapeme:domains", {"x": 0})
    redis_client.zadd("scrapeme:requests:x", {"0": 0})
    redis_client.hset("scrapeme:queued", "x", 3)
    redis_client.rpush("scrapeme:requests:x:0", *[pickle.dumps(Exploit()), b"{garbage", b'{"url": "http://x/", "_class": "os.system"}'])
    redis_client.lpush("scrapeme:start_urls", f"{shop.url}/shop/")
    (worker,) = run_workers("scrapeme", env, tmp_path, 1)

    assert not marker.exists()
    reasons = sorted(json.loads(r)["reason"] for r in redis_client.lrange("scrapeme:bad_requests", 0, -1))
    assert len(reasons) == 3
    assert any("pickle payload refused" in r for r in reasons)
    assert any("not in FRONTIER_REQUEST_CLASSES" in r for r in reasons)
    assert worker.log().count("Refused a request payload") == 3
    assert mongo_db.products.count_documents({}) == 16


def test_an_empty_field_never_overwrites_a_stored_value(mongo_db):
    """Two spiders fill one collection and one of them lacks a field (quotes_js: no author link on the /js/ pages),
    or a spider misses a field once: the stored value stays, the document does not count as changed and the
    change history records nothing for it. A value that really changed is written, with its history."""
    from crawlhub.items import item_meta
    from crawlhub.pipelines.mongo import MongoWriter
    from spiders.items import Quote

    meta = item_meta(Quote())
    full = {"quote_id": "q1", "text": "t", "author": "A", "author_url": "http://127.0.0.1/author/A", "tags": ["x"],
            "source_url": "http://127.0.0.1/page/1/"}
    assert MongoWriter(mongo_db, "quarantine", "quotes").write([(meta, full)], [])["inserted"] == 1
    lacking = {**full, "author_url": None, "tags": [], "source_url": "http://127.0.0.1/js/page/1/"}
    counts = MongoWriter(mongo_db, "quarantine", "quotes_js").write([(meta, lacking)], [])
    assert counts.get("unchanged") == 1 and "updated" not in counts, counts
    (doc,) = mongo_db.quotes.find()
    assert doc["author_url"] == full["author_url"] and doc["tags"] == ["x"] and set(doc["spiders"]) == {"quotes", "quotes_js"}
    assert mongo_db.changes.count_documents({}) == 0
    moved = {**lacking, "text": "t2"}  # a real change, the empty fields still kept
    assert MongoWriter(mongo_db, "quarantine", "quotes_js").write([(meta, moved)], [])["updated"] == 1
    (doc,) = mongo_db.quotes.find()
    assert doc["text"] == "t2" and doc["author_url"] == full["author_url"] and doc["tags"] == ["x"]
    assert [(c["field"], c["old"], c["new"]) for c in mongo_db.changes.find()] == [("text", "t", "t2")]
    # the first spider again, with the old text: one change back, nothing else
    assert MongoWriter(mongo_db, "quarantine", "quotes").write([(meta, full)], [])["updated"] == 1
    assert mongo_db.changes.count_documents({"field": {"$ne": "text"}}) == 0
    # a new document keeps its empty fields as such (a field the store has never seen is still there, empty)
    MongoWriter(mongo_db, "quarantine", "quotes_js").write([(meta, {**lacking, "quote_id": "q2"})], [])
    new = mongo_db.quotes.find_one({"quote_id": "q2"})
    assert new["author_url"] is None and new["tags"] == []


def test_quotes_spider_on_a_local_copy(env, site, redis_client, mongo_db, tmp_path):
    quotes = site(quote_pages(3, 4))
    redis_client.lpush("quotes:start_urls", f"{quotes.url}/")
    run_workers("quotes", env, tmp_path, 1)
    docs = list(mongo_db.quotes.find())
    assert len(docs) == 12 and len({d["quote_id"] for d in docs}) == 12
    q = next(d for d in docs if "number 5," in d["text"])
    assert q["author"] == "Author 0" and q["author_url"] == f"{quotes.url}/author/Author-0"
    assert q["tags"] == ["t0", "t1"] and q["text"] == "“Quote number 5, said <5>.”"


def test_generic_spider_stops_at_depth_3(env, site, redis_client, mongo_db, tmp_path):
    # a chain of pages /d0 -> /d1 -> ... -> /d6, plus a link off the host
    pages = {
        f"/d{n}": f"<html><head><title>Depth {n}</title></head><body><h1>D{n}</h1>"
        f'<a href="/d{n + 1}">next</a> <a href="http://localhost:1/elsewhere">off</a></body></html>'
        for n in range(7)
    }
    chain = site(pages)
    redis_client.lpush("generic:start_urls", f"{chain.url}/d0")
    run_workers("generic", env, tmp_path, 1)
    assert sorted(chain.fetched("/d")) == ["/d0", "/d1", "/d2", "/d3"]
    titles = sorted(d["title"] for d in mongo_db.pages.find())
    assert titles == ["Depth 0", "Depth 1", "Depth 2", "Depth 3"]


def test_writer_sets_aside_what_mongodb_cannot_store_and_writes_the_rest(mongo_db):
    """The driver's own refusal (InvalidDocument, DocumentTooLarge): the rest of the batch is written."""
    from crawlhub.items import Page, item_meta
    from crawlhub.pipelines.mongo import MongoWriter

    meta = item_meta(Page())
    good = {"url": "http://127.0.0.1/a", "status": 200, "title": "fine"}
    bad = {"url": "http://127.0.0.1/b", "status": 200, "title": object()}  # BSON cannot encode it
    big = {"url": "http://127.0.0.1/c", "status": 200, "title": "y" * (17 * 1024 * 1024)}
    counts = MongoWriter(mongo_db, "quarantine", "t").write([(meta, good), (meta, bad), (meta, big)], [])
    assert counts["inserted"] == 1 and counts["refused"] == 2
    assert [d["url"] for d in mongo_db.pages.find()] == [good["url"]]
    reasons = {d["item"]["url"]: d["reasons"][0] for d in mongo_db.quarantine.find()}
    assert reasons[bad["url"]].startswith("MongoDB cannot store it:") and "cannot encode object" in reasons[bad["url"]]
    assert "is over MongoDB's limit" in reasons[big["url"]]


def test_each_document_counts_once_per_epoch_whichever_worker_stores_it_and_however_often(mongo_db):
    """The count behind status' ``items`` (crawlhub.signals.items_stored): documents entering the frontier's
    current epoch. Two workers storing the same pages at once (a stopped worker's page taken by another),
    a page stored again, a changed item, a race on the insert: each document is counted once per epoch."""
    from concurrent.futures import ThreadPoolExecutor

    from crawlhub.items import Page, item_meta
    from crawlhub.pipelines.mongo import MongoWriter

    meta = item_meta(Page())

    def docs(n, title="t"):
        return [(meta, {"url": f"http://127.0.0.1/{i}", "status": 200, "title": title}) for i in range(n)]

    def both_write(batch, epoch):
        writers = [MongoWriter(mongo_db, "quarantine", "shop.v2") for _ in range(2)]  # a dot in the spider's name
        with ThreadPoolExecutor(2) as pool:
            return sum(f.result()["cycle"] for f in [pool.submit(w.write, batch, [], None, epoch) for w in writers])

    assert both_write(docs(40), "e1") == 40  # the inserts race: one wins each, the other's retry counts nothing
    assert both_write(docs(40), "e1") == 0  # stored again in the same epoch
    assert both_write(docs(50, "changed"), "e1") == 10  # changed items are rewritten, only the new ones count
    assert both_write(docs(50), "e2") == 50  # a reset: every document enters the new epoch, once
    # another spider storing the same documents has its own count; the first spider's mark is not moved
    assert MongoWriter(mongo_db, "quarantine", "other").write(docs(50), [], None, "x1")["cycle"] == 50
    assert mongo_db.pages.count_documents({"cycles.shop_v2": "e2", "cycles.other": "x1"}) == 50
    # no epoch (no shared frontier), or no spider: nothing counted, nothing marked
    assert "cycle" not in MongoWriter(mongo_db, "quarantine", "shop.v2").write(docs(60), [], None, "")
    assert "cycle" not in MongoWriter(mongo_db, "quarantine", None).write(docs(60), [], None, "e3")


def test_an_item_type_of_the_projects_own_is_cleaned_validated_and_stored_by_its_key(env, site, redis_client, mongo_db,
                                                                                      tmp_path):
    def listing(books, nxt=None):
        rows = "".join(f'<li data-isbn="{isbn}"><h3> {title} </h3><span class="price">{price}</span>'
                       f'<a href="/book/{isbn}">more</a><img src="../img/{isbn}.jpg"></li>' for isbn, title, price in books)
        more = f'<a class="next" href="{nxt}">next</a>' if nxt else ""
        return f"<html><body><ul>{rows}</ul>{more}</body></html>"

    shop = site({
        "/list/1/": listing([("111", "Dune", "£12.5"), ("222", "Emma", "£1,234.00")], "/list/2/"),
        # the same book again (its key: one document), and one whose price is no price (quarantined)
        "/list/2/": listing([("111", "Dune", "£12.50"), ("333", "Ulysses", "call us")]),
    })
    redis_client.lpush("t_books:start_urls", f"{shop.url}/list/1/")
    run_workers("t_books", {**env, "SPIDER_MODULES": "spiders,tests.sites.spiders"}, tmp_path, 1)
    books = {d["isbn"]: d for d in mongo_db.books.find()}
    assert sorted(books) == ["111", "222"]
    dune = books["111"]
    assert (dune["title"], dune["price"], dune["currency"], dune["shop"]) == ("Dune", "12.50", "GBP", "127.0.0.1")
    assert dune["url"] == f"{shop.url}/book/111" and dune["cover"] == f"{shop.url}/list/img/111.jpg"
    from crawlhub.pipelines.clean import derived_key

    assert dune["slug"] == derived_key("Dune", "111") and books["222"]["price"] == "1234.00"
    assert {i["name"] for i in mongo_db.books.list_indexes()} >= {"item_key"}
    (bad,) = mongo_db.quarantine.find()
    assert bad["collection"] == "books" and bad["item"]["isbn"] == "333"
    assert bad["reasons"] == ["price 'call us' is not a decimal number"]


def rethemed_site(site, tls=True):
    """A site whose links to its pages change between two crawls (``retheme()``): a new theme writes the query's
    arguments in another order, drops an in-page anchor, and redirects to another form of the same URL. Its server
    reads a query's arguments in any order, as real ones do, and answers a link with tracking parameters (utm_*,
    fbclid) as the page without them."""
    from urllib.parse import parse_qsl, urlencode, urlsplit

    def home(item, guide, extra=""):
        return (f'<html><head><title>Home</title></head><body><a href="{item}">item</a> <a href="{guide}">guide</a>'
                f' <a href="/old">old</a>{extra}</body></html>')

    pages = {"/": home("/item?b=2&amp;a=1", "/guide#top", ' <a href="/only-old?b=1&amp;a=2">only old</a>'),
             "/old": (301, "text/html", "", {"Location": "/moved?y=1&z=%7E&x=2"}),
             "/item?a=1&b=2": "<html><head><title>Item</title></head><body>item</body></html>",
             "/guide": "<html><head><title>Guide</title></head><body>guide</body></html>",
             "/moved?x=2&y=1&z=~": "<html><head><title>Moved</title></head><body>moved</body></html>",
             "/only-old?a=2&b=1": "<html><head><title>Only old</title></head><body>linked once</body></html>"}

    def any_order(web, path):  # and a tracking parameter is no page of its own
        parts = urlsplit(path)
        args = sorted((k, v) for k, v in parse_qsl(parts.query) if not k.startswith("utm_") and k != "fbclid")
        page = web.pages.get(f"{parts.path}?{urlencode(args, safe='~')}" if args else parts.path)
        return (200, "text/html; charset=utf-8", page, {}) if isinstance(page, str) else page

    def retheme():  # and a newsletter's and a share button's links, with their tracking parameters
        pages["/"] = home("/item?a=1&amp;b=2", "/guide?utm_source=nav&amp;utm_medium=menu",
                          ' <a href="/item?fbclid=share&amp;a=1&amp;b=2">share</a> <a href="/guide">guide</a>')
        pages["/old"] = (301, "text/html", "", {"Location": "/moved?x=2&y=1&z=~"})

    web = site(pages, tls=tls, handler=any_order)
    web.retheme = retheme
    return web


def test_a_page_met_under_another_form_of_its_url_stays_one_document(env, site, redis_client, mongo_db, tmp_path):
    """A site that changes its links between two crawls (a new theme: the query's arguments in another order, an
    in-page anchor gone, a redirect's target written another way) still has one stored document per page: the
    frontier takes those forms for one request (Scrapy's fingerprint), so the store takes them for one key."""
    web = rethemed_site(site)
    redis_client.lpush("generic:start_urls", f"{web.url}/")
    run_workers("generic", env, tmp_path, 1)
    first = {d["title"]: d for d in mongo_db.pages.find()}
    assert sorted(first) == ["Guide", "Home", "Item", "Moved", "Only old"], sorted(first)

    web.retheme()  # the same pages, linked another way
    assert cli(env, "reset", "generic", "--yes").returncode == 0
    redis_client.lpush("generic:start_urls", f"{web.url}/")
    run_workers("generic", env, tmp_path, 1)
    assert sorted(web.fetched("/item")) == ["/item?a=1&b=2", "/item?b=2&a=1"]  # both forms were fetched
    assert sorted(web.fetched("/guide")) == ["/guide", "/guide?utm_source=nav&utm_medium=menu"]  # once a crawl
    second = {}
    for doc in mongo_db.pages.find():
        assert doc["title"] not in second, f"{doc['title']} stored twice: {doc['url']} and {second[doc['title']]['url']}"
        second[doc["title"]] = doc
    assert sorted(second) == ["Guide", "Home", "Item", "Moved", "Only old"]
    assert {t: d["url"].removeprefix(web.url) for t, d in second.items()} == {
        "Home": "/", "Item": "/item?a=1&b=2", "Guide": "/guide", "Moved": "/moved?x=2&y=1&z=~",
        "Only old": "/only-old?a=2&b=1"}
    for title, doc in second.items():
        if title == "Only old":  # not linked by the new theme
            continue
        assert doc["_id"] == first[title]["_id"] and doc["first_seen"] == first[title]["first_seen"], title
        assert doc["last_seen"] > first[title]["last_seen"], title


def test_documents_stored_before_under_another_form_of_their_url_are_merged_into_one(env, site, redis_client, mongo_db,
                                                                                     tmp_path):
    """A store filled before ITEM_KEY_URLS_CANONICAL (here: a crawl with it off) holds a page under the form of its URL
    the site linked then; the next crawl stores the canonical form beside it. `crawlhub canonicalize-keys` makes them
    one document (the first crawl's first_seen, the newest values, one _id), moves a page stored only under an old
    form, leaves the rest alone; --dry-run changes nothing, and a second run finds nothing to do."""
    web = rethemed_site(site)
    redis_client.lpush("generic:start_urls", f"{web.url}/")
    run_workers("generic", {**env, "ITEM_KEY_URLS_CANONICAL": "0"}, tmp_path, 1)
    old = {d["title"]: d for d in mongo_db.pages.find()}
    assert old["Item"]["url"] == f"{web.url}/item?b=2&a=1"  # as linked: stored by a version before the setting

    web.retheme()
    assert cli(env, "reset", "generic", "--yes").returncode == 0
    redis_client.lpush("generic:start_urls", f"{web.url}/")
    run_workers("generic", env, tmp_path, 1)
    both = sorted(d["title"] for d in mongo_db.pages.find())
    assert both == ["Guide", "Home", "Item", "Item", "Moved", "Moved", "Only old"], both  # what the command is for
    new = {d["url"]: d for d in mongo_db.pages.find()}

    dry = cli(env, "canonicalize-keys", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert ("pages (key: url): 3 document(s) under a key URL not in its canonical form; 1 would be moved to it, 2 "
            "would be merged into a document under it") in dry.stdout, dry.stdout
    assert f"e.g. {web.url}/item?b=2&a=1 -> {web.url}/item?a=1&b=2" in dry.stdout
    assert mongo_db.pages.count_documents({}) == 7  # a dry run changes nothing

    done = cli(env, "canonicalize-keys")
    assert done.returncode == 0, done.stderr
    assert "3 document(s) under a key URL not in its canonical form; 1 moved to it, 2 merged" in done.stdout, done.stdout
    after = {}
    for doc in mongo_db.pages.find():
        assert doc["title"] not in after, f"{doc['title']} still stored twice"
        after[doc["title"]] = doc
    assert sorted(after) == ["Guide", "Home", "Item", "Moved", "Only old"]
    for title, path in (("Item", "/item?a=1&b=2"), ("Moved", "/moved?x=2&y=1&z=~")):
        doc, canonical = after[title], new[f"{web.url}{path}"]
        assert doc["url"] == canonical["url"] and doc["_id"] == canonical["_id"]  # merged into the canonical one
        assert doc["first_seen"] == old[title]["first_seen"] and doc["last_seen"] == canonical["last_seen"]
        assert doc["spiders"] == ["generic"] and doc["content_hash"] == canonical["content_hash"]
    only = after["Only old"]
    assert only["url"] == f"{web.url}/only-old?a=2&b=1" and only["_id"] == old["Only old"]["_id"]  # moved, kept
    assert after["Guide"] == new[f"{web.url}/guide"]  # canonical all along: untouched

    again = cli(env, "canonicalize-keys", "--collection", "pages")
    assert again.returncode == 0 and "pages (key: url): 0 document(s)" in again.stdout, again.stdout
    bad = cli(env, "canonicalize-keys", "--collection", "nope")
    assert bad.returncode == 2 and "--collection 'nope': not an item collection" in bad.stderr, bad.stderr
    assert "its item collections: pages" in bad.stderr
    from tests.sites.server import refused_port

    down = cli({**env, "MONGO_URI": f"mongodb://crawler:s3cret-pw@127.0.0.1:{refused_port()}/"}, "canonicalize-keys")
    assert down.returncode == 3 and "cannot read MongoDB at mongodb://crawler:***@127.0.0.1" in down.stderr, down.stderr
    assert "s3cret-pw" not in down.stderr + down.stdout


def test_merging_two_forms_of_a_key_keeps_the_newest_values_and_every_found_one(mongo_db):
    """What `canonicalize-keys` makes of two copies of one page: the newest values win, an empty one never overwrites
    a found one, the first sight and the spiders of both are kept, the change history follows the key, and the next
    store of the same item counts it unchanged. A single-page app's route (a fragment) is a key of its own."""
    from crawlhub.items import Page, item_meta
    from crawlhub.pipelines.mongo import MongoWriter
    from crawlhub.pipelines.rekey import canonicalize_keys

    meta = item_meta(Page())
    base = {"status": 200, "h1": None, "scraped_at": None}
    raw, canonical = "http://s.test/p?b=2&a=1", "http://s.test/p?a=1&b=2"
    first = {**base, "url": raw, "source_url": raw, "title": "T1", "description": "kept"}
    MongoWriter(mongo_db, "quarantine", "old").write([(meta, first)], [])
    MongoWriter(mongo_db, "quarantine", "old").write([(meta, {**first, "title": "T2"})], [])  # a change, its history
    newer = {**base, "url": canonical, "source_url": canonical, "title": "T3", "description": None}
    MongoWriter(mongo_db, "quarantine", "new").write([(meta, newer)], [])
    routes = [{**base, "url": f"http://app.test/#/item/{n}", "source_url": "http://app.test/", "title": "R"}
              for n in (1, 2)]
    MongoWriter(mongo_db, "quarantine", "new").write([(meta, r) for r in routes], [])
    was = {d["url"]: d for d in mongo_db.pages.find()}
    assert mongo_db.changes.find_one()["key"] == {"url": raw}

    report = canonicalize_keys(mongo_db, "pages")
    assert (report.found, report.moved, report.merged, report.history) == (1, 0, 1, 1)
    assert mongo_db.pages.count_documents({}) == 3
    doc = mongo_db.pages.find_one({"url": canonical})
    assert doc["_id"] == was[canonical]["_id"] and doc["title"] == "T3" and doc["description"] == "kept"
    assert doc["first_seen"] == was[raw]["first_seen"] and doc["last_seen"] == was[canonical]["last_seen"]
    assert doc["spiders"] == ["old", "new"] and doc["changed_at"] == was[canonical]["changed_at"]
    assert [c["key"] for c in mongo_db.changes.find()] == [{"url": canonical}]
    assert {d["url"] for d in mongo_db.pages.find({"title": "R"})} == {r["url"] for r in routes}
    counts = MongoWriter(mongo_db, "quarantine", "new").write([(meta, {**newer, "description": "kept"})], [])
    assert counts.get("unchanged") == 1, counts
    assert canonicalize_keys(mongo_db, "pages").found == 0
