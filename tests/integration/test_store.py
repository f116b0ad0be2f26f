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
