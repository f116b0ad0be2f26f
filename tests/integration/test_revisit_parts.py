"""Continuous crawling's parts on their own: durations, the revisit policy, the status store, the refresher's exactly-once."""


from __future__ import annotations

import json
import time

from crawlhub.extensions.refresher import revisit_payload
from crawlhub.frontier.keys import Keys
from crawlhub.revisit.store import StatusStore
from tests.frontier_ops import Frontier
from tests.unit.test_revisit import settings, update


def test_the_status_store_counts_fetches_and_a_304_keeps_the_validators(mongo_db):
    store = StatusStore(mongo_db.url_status)
    store.write([update("https://s.test/p1")])
    store.write([update("https://s.test/p1", status=304, changed=False, at=1060.0)])
    doc = mongo_db.url_status.find_one({"_id": "shop:p1"})
    assert (doc["fetches"], doc["unchanged"], doc["first_fetch"], doc["last_fetch"]) == (2, 1, 1000.0, 1060.0)
    assert (doc["etag"], doc["signature"], doc["last_status"], doc["next_fetch"]) == ('"e1"', "s1", 304, 1120.0)
    assert "due" in {index["name"] for index in mongo_db.url_status.list_indexes()}


def test_a_refresher_that_dies_mid_batch_queues_nothing_twice(redis_client, mongo_db):
    """Between queueing a batch and marking the store, the refresher dies: the next one skips those pages."""
    store = StatusStore(mongo_db.url_status)
    now = time.time()
    store.write([update(f"https://s.test/p{i:02d}", at=now - 120) for i in range(10)])  # all due 60 s ago
    ops = Frontier(redis_client, Keys.for_spider(settings(), "shop"), "shop")

    def pages(docs):
        return [{"fp": d["fp"], "due": d["next_fetch"], "payload": revisit_payload(d), "priority": 0,
                 "domain": d["domain"]} for d in docs]

    first = store.due("shop", now, 4)
    assert len(ops.refresh(pages(first))) == 4  # ... and the refresher dies before store.queued()
    second = store.due("shop", time.time(), 100)
    assert len(second) == 10, "the store still says all ten are due"
    assert len(ops.refresh(pages(second))) == 6, "the four already queued for this due time are skipped"
    store.queued([(d["_id"], d["next_fetch"]) for d in second], time.time(), 86400)
    assert store.due("shop", time.time(), 100) == []
    taken, _ = ops.lease("w", 60, 100)
    urls = [json.loads(p)["url"] for _, p in taken]
    assert sorted(urls) == [f"https://s.test/p{i:02d}" for i in range(10)], "every due page queued exactly once"
    revisit = json.loads(taken[0][1])
    assert revisit["dont_filter"] and revisit["meta"]["crawlhub_status"]["etag"] == '"e1"'


def test_a_newer_lastmod_makes_only_a_page_fetched_before_it_due(mongo_db):
    from crawlhub.revisit.sitemaps import LastModified

    store = StatusStore(mongo_db.url_status)
    store.write([update("https://s.test/p1", at=1000.0), update("https://s.test/p2", at=1000.0)])
    # at 1030, both are due at 1060; p1's sitemap says it changed at 1020 (after its fetch), p2's at 900
    store.write([LastModified("shop", "p1", 1020.0, 1030.0), LastModified("shop", "p2", 900.0, 1030.0),
                 LastModified("shop", "zz", 1020.0, 1030.0)])
    due = {d["fp"]: d["next_fetch"] for d in mongo_db.url_status.find()}
    assert due == {"p1": 1030.0, "p2": 1060.0}, "p1 changed after its fetch: due now; p2 did not; no insert for zz"


def test_the_due_scan_walks_every_due_page_once_in_windows(mongo_db):
    from crawlhub.revisit.store import DueScanner

    store = StatusStore(mongo_db.url_status)
    now = time.time()
    # due times spread from a year ago to a second ago, five of them on the same second; two not due yet
    times = [now - 365 * 86400, now - 30 * 86400, *[now - 7200] * 5, now - 60, now - 1, now + 60, now + 3600]
    for i, due in enumerate(times):
        store.write([update(f"https://s.test/{i:02d}", at=due - 60.0)])  # interval 60 s: next_fetch = due
    scanner = DueScanner(store, "shop", batch=3)
    seen, calls = [], 0
    while calls < 20:
        batch = scanner.next_batch(now)
        calls += 1
        if not batch:
            break
        assert len(batch) <= 3
        seen += [d["fp"] for d in batch]
        store.queued([(d["_id"], d["next_fetch"]) for d in batch], now, 86400)
    assert sorted(seen) == [f"{i:02d}" for i in range(9)], "every due page, once; none of those not due"
    assert scanner.caught_up and scanner.floor == now - DueScanner.CLOCK_MARGIN, "the pass is over"
    store.write([update("https://s.test/xx", at=now - 61.0)])  # a page made due just now
    assert [d["fp"] for d in scanner.next_batch(now + 5)] == ["xx"], "seen by the next pass"
    assert scanner.next_batch(now + 5) == [] and scanner.caught_up


def test_gone_items_are_found_in_every_item_collection_even_by_a_fresh_worker(mongo_db):
    from datetime import datetime, timezone

    from crawlhub.items import Page, item_meta
    from crawlhub.pipelines.mongo import MongoWriter
    from crawlhub.revisit.store import GoneCheck

    first = MongoWriter(mongo_db, "quarantine", "shop")
    page = "https://s.test/list"
    items = [Page(url=f"https://s.test/{n}", status=200, source_url=page) for n in ("a", "b")]
    first.write([(item_meta(i), {**vars(i)}) for i in items], [])
    fetched_again = datetime.now(timezone.utc).timestamp() + 1
    fresh = MongoWriter(mongo_db, "quarantine", "shop")  # another worker: it has stored nothing yet
    counts = fresh.write([], [], [GoneCheck(page, fetched_again, everything=True)])  # the page now answers 404
    assert counts["gone"] == 2
    assert all(doc["gone_at"] for doc in mongo_db.pages.find()), "marked, not deleted"
    first.write([(item_meta(items[0]), {**vars(items[0])})], [])
    assert [d["url"] for d in mongo_db.pages.find({"gone_at": None})] == ["https://s.test/a"], "seen again: unmarked"


def test_with_a_gone_delay_a_missing_item_waits_once_and_is_gone_only_if_unseen_till_its_due_time(mongo_db):
    from datetime import datetime, timedelta, timezone

    from crawlhub.items import Page, item_meta
    from crawlhub.pipelines.mongo import MongoWriter
    from crawlhub.revisit.store import GoneCheck, StatusStore

    writer = MongoWriter(mongo_db, "quarantine", "shop")
    page = "https://s.test/list"
    items = [Page(url=f"https://s.test/{n}", status=200, source_url=page) for n in ("a", "b", "c")]
    writer.write([(item_meta(i), {**vars(i)}) for i in items], [])
    later = datetime.now(timezone.utc).timestamp() + 1
    counts = writer.write([], [], [GoneCheck(page, later, delay=60)])  # the page's revisit shows none of them
    assert counts["missing"] == 3 and not counts.get("gone"), counts
    waiting = {d["url"][-1]: d for d in mongo_db.pages.find()}
    assert all(d.get("gone_at") is None and d["gone_due"] - d["missing_since"] == timedelta(seconds=60)
               for d in waiting.values()), "waiting, not gone"
    assert not writer.write([], [], [GoneCheck(page, later + 30, delay=60)]).get("missing"), \
        "a second miss does not defer it"
    assert [d["gone_due"] for d in mongo_db.pages.find()] == [d["gone_due"] for d in waiting.values()]
    assert not writer.write([], [], [], confirm=True).get("gone_confirmed"), "nothing is due yet"
    schedule = StatusStore(mongo_db.url_status).missing_items("shop")  # what `crawlhub schedule` shows
    assert (schedule["missing"], schedule["missing_overdue"]) == (3, 0), schedule
    # "a" turns up (on another page); "b" and "c" stay unseen past their due time ("c" is due now)
    writer.write([(item_meta(items[0]), {**vars(items[0]), "source_url": "https://s.test/list?page=2"})], [])
    mongo_db.pages.update_many({"url": {"$in": ["https://s.test/b", "https://s.test/c"]}},
                               {"$set": {"gone_due": datetime.now(timezone.utc) - timedelta(seconds=1)}})
    schedule = StatusStore(mongo_db.url_status).missing_items("shop")
    assert (schedule["missing"], schedule["missing_overdue"]) == (2, 2), "past their wait's end, not yet marked"
    fresh = MongoWriter(mongo_db, "quarantine", "shop")  # any worker confirms: the wait is in MongoDB
    assert fresh.write([], [], [], confirm=True)["gone_confirmed"] == 2
    docs = {d["url"][-1]: d for d in mongo_db.pages.find()}
    assert not {"gone_at", "missing_since", "gone_due"} & set(docs["a"]), "seen again: no longer missing"
    assert docs["b"]["gone_at"] and docs["c"]["gone_at"] and not {"gone_due"} & (set(docs["b"]) | set(docs["c"]))
    assert docs["b"]["missing_since"] == waiting["b"]["missing_since"], "when it was first missed, kept"
    assert {"source_url", "gone_due"} <= {i["name"] for i in mongo_db.pages.list_indexes()}
    assert GoneCheck(page, later, delay=0).mark(mongo_db.pages, datetime.now(timezone.utc)) == 0, "gone stays gone"
