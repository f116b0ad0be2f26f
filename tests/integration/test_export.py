"""`crawlhub export`: real crawls into the real MongoDB-wire server, files read back with the standard library."""


from __future__ import annotations

import csv
import io
import json
import os
import pty
import select
import subprocess
import sys
import xml.etree.ElementTree as ET
from datetime import datetime, timezone

import pymongo
import pytest

from bench.export import fill
from crawlhub.export import plain
from crawlhub.items import BOOKKEEPING_FIELDS
from crawlhub.revisit.store import GoneCheck
from crawlhub.services import EmbeddedMongo
from tests.harness import ROOT, cli, crawl_env, run_workers
from tests.sites.shop import product_price, shop_pages


def stored(mongo_db, collection="products", keep=()) -> dict[str, dict]:
    """The stored items as an export shows them: the store's fields left out, values made plain, by id."""
    drop = set(BOOKKEEPING_FIELDS) - set(keep)
    return {d["id"]: {k: plain(v) for k, v in d.items() if k not in drop} for d in mongo_db[collection].find()}


def as_csv_cell(value) -> str:
    if value is None:
        return ""
    if isinstance(value, list):
        return ",".join(map(str, value))
    return str(value)


def test_every_format_holds_exactly_the_stored_items(env, site, redis_client, mongo_db, tmp_path):
    pages = shop_pages(40, 8)
    shop = site(pages, tls=True)
    redis_client.lpush("scrapeme:start_urls", f"{shop.url}/shop/")
    run_workers("scrapeme", env, tmp_path, 1)
    items = stored(mongo_db)
    assert len(items) == 40

    files = {}
    for fmt in ("jsonl", "json", "csv", "xml"):
        path = tmp_path / f"products.{fmt}"
        out = cli(env, "export", "scrapeme", "-o", str(path))
        assert out.returncode == 0, out.stderr
        assert f"exported 40 item(s) of scrapeme from {mongo_db.name}.products to {path} as {fmt}" in out.stderr
        assert "items/s" not in out.stderr, "no progress bar when stderr is not a terminal"
        assert not (tmp_path / f"products.{fmt}.part").exists()
        files[fmt] = path.read_text(encoding="utf-8")

    jsonl = [json.loads(line) for line in files["jsonl"].splitlines()]
    assert {d["id"]: d for d in jsonl} == items and len(jsonl) == 40
    as_json = json.loads(files["json"])
    assert {d["id"]: d for d in as_json} == items and len(as_json) == 40
    rows = list(csv.DictReader(io.StringIO(files["csv"])))
    assert len(rows) == 40 and set(rows[0]) == set(next(iter(items.values())))
    assert {r["id"]: r for r in rows} == {i: {k: as_csv_cell(v) for k, v in d.items()} for i, d in items.items()}
    root = ET.fromstring(files["xml"])
    assert root.tag == "items" and len(root) == 40
    by_id = {item.findtext("id"): item for item in root}
    for i, doc in items.items():
        node = by_id[i]
        assert {child.tag for child in node} == {k for k, v in doc.items() if v is not None}
        for name, value in doc.items():
            if isinstance(value, list):
                assert [v.text for v in node.find(name)] == [str(v) for v in value]
            elif value is not None:
                assert node.findtext(name) == str(value)

    # standard output, a format named, chosen fields in their order
    out = cli(env, "export", "scrapeme", "-t", "csv", "--fields", "id,price,name")
    assert out.returncode == 0, out.stderr
    rows = list(csv.reader(io.StringIO(out.stdout)))
    assert rows[0] == ["id", "price", "name"] and len(rows) == 41
    assert {r[0]: r[1] for r in rows[1:]} == {i: d["price"] for i, d in items.items()}
    # --meta keeps the store's fields; --since selects by the time content was written
    meta = [json.loads(line) for line in cli(env, "export", "scrapeme", "--meta").stdout.splitlines()]
    assert all(d["spiders"] == ["scrapeme"] and d["first_seen"] and d["changed_at"] for d in meta)
    assert len(cli(env, "export", "scrapeme", "--since", "1h").stdout.splitlines()) == 40

    # nothing to export: the error names the database and the collection; no file is left
    future = cli(env, "export", "scrapeme", "--since", "2099-01-01", "-o", str(tmp_path / "none.json"))
    assert future.returncode == 1 and f"database '{mongo_db.name}'" in future.stderr and "'products'" in future.stderr
    assert not (tmp_path / "none.json").exists() and not (tmp_path / "none.json.part").exists()
    missing = cli(env, "export", "scrapeme", "--collection", "nosuch")
    assert missing.returncode == 1 and "has no collection 'nosuch' (it has: " in missing.stderr and "products" in missing.stderr
    other = cli(env, "export", "quotes")
    assert other.returncode == 1 and "no item of spider 'quotes'" in other.stderr and "this project has no" not in other.stderr
    # a spider the project does not have, and nothing stored under its name: bad input, exit 2 as for `status` and
    # `dlq` (issue #28 changed this promise from 1; docs/cli.md's table); one with items stored exports them (below)
    typo = cli(env, "export", "scrapme")
    assert typo.returncode == 2 and "this project has no spider 'scrapme'; its spiders: " in typo.stderr
    mongo_db.products.update_many({}, {"$addToSet": {"spiders": "retired"}})
    retired = cli(env, "export", "retired")
    assert retired.returncode == 0 and len(retired.stdout.splitlines()) == 40, retired.stderr
    mongo_db.products.update_many({}, {"$pull": {"spiders": "retired"}})
    bad = cli(env, "export", "scrapeme", "--since", "yesterday")
    assert bad.returncode == 2 and "--since 'yesterday'" in bad.stderr

    # a recrawl changes one price and finds one page's products gone: --history and --include-gone
    pages["/shop/page/2/"] = pages["/shop/page/2/"].replace(f"</span>{product_price(10)}</span>", "</span>21.00</span>")
    assert cli(env, "reset", "scrapeme", "--yes").returncode == 0
    redis_client.lpush("scrapeme:start_urls", f"{shop.url}/shop/")
    run_workers("scrapeme", env, tmp_path, 1)
    page5 = f"{shop.url}/shop/page/5/"
    gone = GoneCheck(page5, fetched_at=datetime.now(timezone.utc).timestamp(), everything=True)
    assert gone.mark(mongo_db.products, datetime.now(timezone.utc)) == 8

    history = [json.loads(line) for line in cli(env, "export", "scrapeme", "--history").stdout.splitlines()]
    assert [(h["field"], h["old"], h["new"], h["key"]["id"]) for h in history] == [
        ("price", product_price(10), "21.00", "710")]
    assert set(history[0]) == {"at", "collection", "key", "field", "old", "new", "url", "spider"}
    changed = [json.loads(line) for line in cli(env, "export", "scrapeme", "--since", "1h").stdout.splitlines()]
    assert len(changed) == 32, "gone items are left out"
    live = cli(env, "export", "scrapeme", "-t", "csv")
    assert len(list(csv.DictReader(io.StringIO(live.stdout)))) == 32
    everything = [json.loads(line) for line in cli(env, "export", "scrapeme", "--include-gone").stdout.splitlines()]
    assert len(everything) == 40
    assert sorted(d["id"] for d in everything if d.get("gone_at")) == sorted(
        i for i, d in stored(mongo_db, keep=("gone_at",)).items() if d.get("gone_at"))
    assert sum(bool(d.get("gone_at")) for d in everything) == 8


@pytest.fixture
def own_store(tmp_path):
    """A MongoDB-wire server of the test's own, stopped and its data left to tmp_path: dropping 200,000
    documents from the shared server took it a minute (SecantusDB deletes them one by one)."""
    server = EmbeddedMongo(tmp_path / "store")
    server.ensure()
    client: pymongo.MongoClient = pymongo.MongoClient(server.url(), serverSelectionTimeoutMS=10000)
    yield server.url(), client["export"]
    client.close()
    server.stop()


# filling the server with 200,000 documents is most of this test (1,800 a second on a loaded CI machine: two
# minutes, the export two more); the default 300 s guards against a hang, this test's against a slow machine
@pytest.mark.timeout(600)
def test_a_200000_item_export_runs_in_constant_memory_with_a_progress_bar_on_a_terminal(own_store, redis_url, tmp_path):
    mongo_uri, mongo_db = own_store
    env = crawl_env(redis_url, mongo_uri, mongo_db.name, tmp_path / "home")
    total = 200_000
    fill(mongo_db, total)  # product documents as the store writes them (bench/export.py's)
    path = tmp_path / "all.jsonl"

    # the command runs under a small launcher that reports its peak memory: a child forked straight
    # from pytest would count pytest's own pages (resident in the child until it execs) in its peak
    peak_file = tmp_path / "peak"
    launcher = ("import resource, subprocess, sys; code = subprocess.call(sys.argv[2:]); "
                "open(sys.argv[1], 'w').write(str(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)); "
                "sys.exit(code)")
    primary, secondary = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-c", launcher, str(peak_file),
                             sys.executable, "-m", "crawlhub.cli", "export", "scrapeme", "-o", str(path)], cwd=ROOT,
                            env={**env, "COLUMNS": "120", "TERM": "xterm"}, stdin=subprocess.DEVNULL, stdout=secondary,
                            stderr=secondary, close_fds=True)
    os.close(secondary)
    screen = b""
    while True:  # read the terminal until the command closes it
        ready, _, _ = select.select([primary], [], [], 120)
        if not ready:
            break
        try:
            data = os.read(primary, 65536)
        except OSError:  # EIO: the command exited and closed its side
            break
        if not data:
            break
        screen += data
    code = proc.wait(30)
    os.close(primary)
    text = screen.decode(errors="replace")
    assert code == 0, text[-2000:]
    peak_mb = int(peak_file.read_text()) / 1024  # ru_maxrss: kilobytes on Linux
    print(f"export of {total} items: peak memory {peak_mb:.1f} MB")
    assert peak_mb < 100, f"the export held {peak_mb:.1f} MB"

    with open(path, encoding="utf-8") as f:
        count = sum(1 for _ in f)
    assert count == total
    assert "exporting" in text and f"{total}/{total}" in text and "items/s" in text, text[-2000:]
    assert "\r" in text or "\x1b[" in text, "the bar redraws in place"


def test_an_export_since_a_time_with_gone_items_has_the_items_found_gone_since_then(mongo_db):
    """A data team's delta (`--since 1d --include-gone`) must carry the removals of that day: an item whose content
    last changed a week ago and that a revisit found gone an hour ago is in it, with its gone_at; one found gone a
    week ago is not, nor is one that only waits to be marked (REVISIT_GONE_DELAY: not known gone yet)."""
    import io as _io
    from datetime import timedelta

    from crawlhub.export import export, plan

    now = datetime.now(timezone.utc)
    week, hour = now - timedelta(days=7), now - timedelta(hours=1)
    base = {"spiders": ["shop"], "first_seen": week, "last_seen": week, "changed_at": week}
    mongo_db.products.insert_many([
        {**base, "id": "changed", "changed_at": hour, "last_seen": hour},
        {**base, "id": "unchanged"},
        {**base, "id": "gone-today", "gone_at": hour},
        {**base, "id": "gone-last-week", "gone_at": week},
        {**base, "id": "waiting", "missing_since": hour, "gone_due": now + timedelta(hours=1)},
    ])
    mongo_db.products.create_index([("id", pymongo.ASCENDING)], unique=True, name="item_key")

    def ids(**options) -> list[str]:
        out = _io.BytesIO()
        export(mongo_db, plan(mongo_db, "shop", since=now - timedelta(days=1), **options), "jsonl", out)
        return sorted(json.loads(line)["id"] for line in out.getvalue().splitlines())

    assert ids() == ["changed"], "without --include-gone: what was stored or changed"
    assert ids(include_gone=True) == ["changed", "gone-today"]


def test_an_item_seen_again_after_it_was_found_gone_is_in_the_next_delta(mongo_db):
    """A delta consumer that took an item's gone_at (`--since ... --include-gone`) must learn that it came back: an
    item seen again, its content unchanged, gets changed_at with losing its mark, so `--since` carries it."""
    import io as _io
    from datetime import timedelta

    from crawlhub.export import export, plan
    from crawlhub.items import Page, item_meta
    from crawlhub.pipelines.mongo import MongoWriter

    writer = MongoWriter(mongo_db, "quarantine", "shop")
    page = Page(url="https://s.test/p/1", status=200, source_url="https://s.test/list")
    writer.write([(item_meta(page), {**vars(page)})], [])
    now = datetime.now(timezone.utc)
    GoneCheck(page.source_url, now.timestamp() + 1, everything=True).mark(mongo_db.pages, now - timedelta(days=2))
    week = now - timedelta(days=7)  # stored a week ago, found gone two days ago
    mongo_db.pages.update_many({}, {"$set": {"first_seen": week, "last_seen": week, "changed_at": week}})
    since = now - timedelta(days=1)
    writer.write([(item_meta(page), {**vars(page)})], [])  # seen again today, the same content
    doc = mongo_db.pages.find_one()
    assert doc.get("gone_at") is None and doc["changed_at"].replace(tzinfo=timezone.utc) > since
    out = _io.BytesIO()
    export(mongo_db, plan(mongo_db, "shop", since=since), "jsonl", out)
    assert [json.loads(line)["url"] for line in out.getvalue().splitlines()] == [page.url]
    assert not mongo_db.changes.count_documents({}), "no field changed: no change record"


def test_an_item_whose_wait_ended_is_gone_in_every_export_before_and_after_a_worker_marks_it(mongo_db):
    """REVISIT_GONE_DELAY: an item a revisit found missing waits (gone_due), and a worker of the spider marks it gone
    once the wait ends. With no worker running (the crawl finished, the night's workers stopped) nobody marks it: an
    export must not hand it to the data team as live meanwhile. `--include-gone` carries it, its gone_at the wait's
    end; the worker's mark later stores that same time, so the next delta does not carry the removal twice; and an
    item seen again after its wait ended is in the next delta, as one seen again after a mark is."""
    import io as _io
    from datetime import timedelta

    from crawlhub.export import export, plan
    from crawlhub.items import Page, item_meta
    from crawlhub.pipelines.mongo import MongoWriter

    writer = MongoWriter(mongo_db, "quarantine", "shop")
    pages = [Page(url=f"https://s.test/p/{n}", status=200, source_url="https://s.test/list") for n in (1, 2, 3, 4)]
    writer.write([(item_meta(page), {**vars(page)}) for page in pages], [])
    now = datetime.now(timezone.utc)
    week, ended = now - timedelta(days=7), now - timedelta(hours=3)
    ended = ended.replace(microsecond=ended.microsecond // 1000 * 1000)  # as BSON keeps it: milliseconds
    mongo_db.pages.update_many({}, {"$set": {"first_seen": week, "last_seen": week, "changed_at": week}})
    mongo_db.pages.update_many({"url": {"$ne": pages[2].url}},  # 1, 2 and 4 missing since yesterday, the wait over
                               {"$set": {"missing_since": now - timedelta(days=1), "gone_due": ended}})

    def urls(**options) -> list[tuple[str, str | None]]:
        out = _io.BytesIO()
        export(mongo_db, plan(mongo_db, "shop", **options), "jsonl", out)
        return sorted((doc["url"], doc.get("gone_at")) for doc in map(json.loads, out.getvalue().splitlines()))

    assert urls() == [(pages[2].url, None)], "an item whose wait ended is gone, marked or not"
    assert urls(since=now - timedelta(days=1), include_gone=True) == [
        (pages[n].url, plain(ended)) for n in (0, 1, 3)], "the day's delta carries them, the wait's end as gone_at"

    delta_taken = datetime.now(timezone.utc)
    writer.write([(item_meta(pages[3]), {**vars(pages[3])})], [])  # 4 is seen again (the same content), not marked
    assert writer.confirm_gone() == 2
    marked = {doc["url"]: doc for doc in mongo_db.pages.find()}
    assert plain(marked[pages[0].url]["gone_at"]) == plain(ended), "marked at the wait's end, as exported"
    assert not {"gone_at", "gone_due"} & set(marked[pages[3].url])
    assert urls(since=delta_taken, include_gone=True) == [(pages[3].url, None)], \
        "the next delta: 4's return, not 1's and 2's removals a second time"


@pytest.mark.parametrize("include_gone", [False, True], ids=["live", "with-gone"])
def test_a_delta_takes_each_item_once_and_exactly_what_its_definition_says(mongo_db, include_gone):
    """`export --since` reads a delta as several queries, each led by an indexed field (one `$or` of them made
    SecantusDB read the whole collection). Together they must take exactly what the delta's definition names, and
    each item once: on every mix of changed_at (none, before, since), last_seen, gone_at and gone_due (none, ended
    before since, ended since, not yet ended)."""
    import io as _io
    import itertools
    from datetime import timedelta

    from crawlhub.export import export, plan

    now = datetime.now(timezone.utc)
    since, before, after, later = now - timedelta(days=1), now - timedelta(days=3), now - timedelta(hours=2), \
        now + timedelta(hours=2)
    docs = []
    for n, (changed, seen, gone_at, gone_due) in enumerate(itertools.product(
            (None, before, after), (before, after), (None, before, after), (None, before, after, later))):
        if changed is not None and seen < changed:
            continue  # the store moves last_seen with every write
        doc = {"id": str(n), "spiders": ["shop"], "last_seen": seen}
        doc.update({name: value for name, value in
                    (("changed_at", changed), ("gone_at", gone_at), ("gone_due", gone_due)) if value is not None})
        docs.append(doc)
    mongo_db.products.insert_many(docs)

    def expected(doc: dict) -> bool:  # the delta's definition, item by item
        changed, gone_at, gone_due = doc.get("changed_at"), doc.get("gone_at"), doc.get("gone_due")
        wait_over = gone_at is None and gone_due is not None and gone_due <= now
        if not include_gone and (gone_at is not None or wait_over):
            return False
        written = changed >= since if changed is not None else doc["last_seen"] >= since
        removed = (gone_at is not None and gone_at >= since) or (wait_over and gone_due >= since)
        return written or (include_gone and removed)

    out = _io.BytesIO()
    export(mongo_db, plan(mongo_db, "shop", since=since, include_gone=include_gone), "jsonl", out)
    taken = [json.loads(line)["id"] for line in out.getvalue().splitlines()]
    assert len(taken) == len(set(taken)), "an item taken twice"
    assert sorted(taken, key=int) == [doc["id"] for doc in docs if expected(doc)]


def test_the_store_indexes_what_a_delta_reads_and_takes_an_operators_own_index_on_it(mongo_db):
    """The fields a delta's queries lead with are indexed with each item collection; an index an operator made on one
    of them before (another name) serves and is not an error that stops the store."""
    from crawlhub.items import Page, item_meta
    from crawlhub.pipelines.mongo import DELTA_FIELDS, MongoWriter

    mongo_db.pages.create_index("changed_at")  # changed_at_1
    page = Page(url="https://s.test/p/1", status=200, source_url="https://s.test/list")
    MongoWriter(mongo_db, "quarantine", "shop").write([(item_meta(page), {**vars(page)})], [])
    indexed = {tuple(name for name, _ in index["key"]) for index in mongo_db.pages.index_information().values()}
    assert {(name,) for name in DELTA_FIELDS} <= indexed and mongo_db.pages.count_documents({}) == 1
