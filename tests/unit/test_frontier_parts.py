"""The frontier's small units on their own: LeaseBook, RetryPolicy, the typed records, frontier_of."""


from __future__ import annotations

import json

import pytest
from scrapy import Request, Spider
from scrapy.utils.test import get_crawler

from crawlhub import meta
from crawlhub.frontier import keys as key_names
from crawlhub.frontier import scripts
from crawlhub.frontier.leasebook import LeaseBook
from crawlhub.frontier.policy import Requeue, RetryPolicy
from crawlhub.frontier.records import ENQUEUE_ARGV, DeadLetter, EnqueueOp, ExpiredLease, Finish, Tick
from crawlhub.frontier.view import frontier_of


def leased(book: LeaseBook, lease_id: str, url: str) -> Request:
    request = Request(url)
    book.add(lease_id, request, json.dumps({"url": url}).encode())
    return request


def test_a_lease_is_done_when_its_output_and_every_item_are():
    book = LeaseBook()
    page = leased(book, "1@a.test", "http://a.test/")
    book.item_emitted(page)
    book.item_emitted(page)
    assert book.output_finished(page) is None, "two items still in the pipelines"
    assert book.item_finished(page) is None
    done = book.item_finished(page)
    assert done is not None and done.id == "1@a.test" and done.error is None


def test_a_failed_callback_marks_its_lease_for_the_dlq():
    book = LeaseBook()
    page = leased(book, "1@a.test", "http://a.test/")
    done = book.output_finished(page, ValueError("bad markup"))
    assert done is not None and done.error == "callback error: ValueError: bad markup"


def test_a_redirect_ends_its_lease_and_a_child_starts_clean():
    book = LeaseBook()
    page = leased(book, "1@a.test", "http://a.test/old")
    redirected = page.replace(url="http://a.test/new")
    redirected.meta["redirect_urls"] = ["http://a.test/old"]
    assert book.ended_by(redirected) == "1@a.test" and "1@a.test" not in book
    parent = leased(book, "2@a.test", "http://a.test/list")
    parent.meta.update({meta.ATTEMPTS: 2, meta.FIRST_ATTEMPT: 1.0, meta.EXPIRIES: 1})
    child = Request("http://a.test/item", meta=dict(parent.meta))
    assert book.ended_by(child) == "", "a link is a new request: it ends no lease"
    assert not set(child.meta) & set(meta.PARENT_ONLY), "and carries none of its parent's attempts"
    assert "2@a.test" in book


def test_the_store_handshake_hands_back_what_a_failed_flush_covered():
    book = LeaseBook()
    book.ready = ["1@a", "2@a"]
    covered = book.take_ready()
    book.ready.append("3@a")
    book.put_back(covered)
    assert book.take_ready() == ["1@a", "2@a", "3@a"]


def test_held_counts_only_leases_still_downloading():
    book = LeaseBook()
    for i, domain in enumerate(("a.test", "a.test", "b.test")):
        leased(book, f"{i}@{domain}", f"http://{domain}/{i}")
    book.download_finished("0@a.test")
    assert book.held() == {"a.test": 1, "b.test": 1}


def test_the_sweep_says_once_a_download_in_the_engine_longer_than_any_timeout(caplog):
    """A download handler that never ends its download (curl_cffi's AsyncSession can wait for ever) keeps its
    request in the engine and its lease renewed: the warden's sweep says so, once a lease, and counts it."""
    from types import SimpleNamespace

    from crawlhub.frontier.warden import LeaseWarden

    crawler = get_crawler(Spider, {"DOWNLOAD_TIMEOUT": 20, "BROWSER_TIMEOUT": 30})
    book = LeaseBook()
    stuck, done, prefetched = (leased(book, f"{i}@a.test", f"http://a.test/{i}") for i in range(3))
    book.download_finished("1@a.test")  # (its download is over: the callback's output is what it waits for)
    crawler.engine = SimpleNamespace(_slot=SimpleNamespace(inprogress={stuck, done}))  # (what Scrapy's engine holds)
    warden = LeaseWarden(crawler, SimpleNamespace(leases=book, stats=crawler.stats), lambda: [prefetched])
    assert warden.long_download == 90.0
    assert warden.sweep() == 0 and not caplog.records
    for lease in book:
        lease.in_engine_since -= 91.0  # (seen 91 s ago: a clock's tick instead of a wait)
    assert warden.sweep() == 0 and warden.sweep() == 0
    said = [r.getMessage() for r in caplog.records if "downloading for more than 90 s" in r.getMessage()]
    assert len(said) == 1 and "http://a.test/0" in said[0] and "0@a.test" in said[0], said
    assert crawler.stats.get_value("leases/long_downloads") == 1


def test_retry_policy_backs_off_within_bounds_and_gives_up():
    policy = RetryPolicy(retry_times=2, backoff_base=2.0, backoff_max=5.0)
    assert [policy.gives_up(a) for a in (1, 2, 3)] == [False, False, True]
    for attempts, low, high in ((1, 1.0, 2.0), (2, 2.0, 4.0), (5, 2.5, 5.0)):
        assert low <= policy.backoff(attempts) <= high
    assert policy.backoff(1, retry_after=30) == 30, "never sooner than Retry-After"


def test_an_expired_lease_is_requeued_then_dead_lettered():
    policy = RetryPolicy(max_expiries=1)
    payload = json.dumps({"url": "http://a.test/x", "priority": 3}).encode()
    first = policy.after_expiry(ExpiredLease("1@a.test", "w1", 100.0, payload), "sp")
    assert isinstance(first, Requeue) and first.priority == 3
    again = json.loads(first.payload)
    assert again["dont_filter"] and again["meta"][meta.EXPIRIES] == 1 and again["meta"][meta.ATTEMPTS] == 1
    second = policy.after_expiry(ExpiredLease("2@a.test", "w2", 200.0, first.payload), "sp")
    assert isinstance(second, DeadLetter) and second.error == "lease expired 2 times (last holder w2)"
    assert second.first_attempt == 100.0, "the first attempt's time is kept"
    assert policy.after_expiry(ExpiredLease("3@a.test", "w", 0, b"\x80 not json"), "sp") is None


def test_an_expired_lease_whose_page_was_over_goes_back_with_nothing_counted():
    """Its holder died while its items waited for the store: not the page's doing. Counted, a page could go to the
    DLQ for workers killed around it (a spot instance reclaimed six times); a page that kills the worker parsing
    it is never done, and is counted each time."""
    policy = RetryPolicy(max_expiries=1)
    payload = json.dumps({"url": "http://a.test/x", "meta": {meta.EXPIRIES: 1, meta.ATTEMPTS: 1}}).encode()
    again = policy.after_expiry(ExpiredLease("1@a.test", "w1", 100.0, payload, done=True), "sp")
    assert isinstance(again, Requeue), "one expiry counted already, the next would be the DLQ: not for a page over"
    assert json.loads(again.payload)["meta"] == {meta.EXPIRIES: 1, meta.ATTEMPTS: 1, meta.FIRST_ATTEMPT: 100.0}
    assert json.loads(again.payload)["dont_filter"]
    assert isinstance(policy.after_expiry(ExpiredLease("2@a.test", "w2", 100.0, again.payload), "sp"), DeadLetter)


def test_a_dead_letter_round_trips_with_its_fields_in_order():
    letter = DeadLetter("http://a.test/", "sp", 3, 503, "HTTP 503", 1.0, 2.0, "w", '{"url": "http://a.test/"}',
                        extra={"note": "kept"})
    raw = letter.to_json()
    assert list(json.loads(raw)) == ["url", "spider", "attempts", "status", "error", "first_attempt",
                                     "last_attempt", "worker", "request", "note"]
    assert DeadLetter.from_json(raw) == letter


def test_records_cross_into_lua_with_named_fields():
    op = EnqueueOp("ab" * 20, b'{"url": "http://a.test/"}', 2, True, "", "a.test")
    assert op.to_lua(["s", "k", "1"]) == {"spec": ["s", "k", "1"], "payload": '{"url": "http://a.test/"}',
                                          "priority": 2, "force": True, "ends": "", "token": "", "domain": "a.test"}
    assert Finish("a.test", "1@a.test", "slow", 3.0).to_lua() == {
        "domain": "a.test", "lease": "1@a.test", "outcome": "slow", "retry_after": 3.0}
    tick = scripts.source("tick")
    for name in ("f.domain", "f.lease", "f.outcome", "f.retry_after"):
        assert name in tick, f"tick.lua reads {name}"
    # #17: an enqueue crosses as two arguments, its fields tab-separated in records.ENQUEUE_ARGV order (the
    # names tick.lua gives them) and its payload: no JSON and no Lua table per link
    assert f"local {', '.join(ENQUEUE_ARGV)} =" in tick
    fields, payload = op.to_argv(["s", "k", "1"])
    assert dict(zip(ENQUEUE_ARGV, fields.split("\t"), strict=True)) == {
        "kind": "s", "key": "k", "extra": "1", "priority": "2", "force": "1", "ends": "", "token": "",
        "domain": "a.test"}
    assert payload == b'{"url": "http://a.test/"}'
    bloom = dict(zip(ENQUEUE_ARGV, op.to_argv(["b", "bits", 1000, 3, 7])[0].split("\t"), strict=True))
    assert (bloom["kind"], bloom["key"], bloom["extra"]) == ("b", "bits", "1000,3,7")
    reply = Tick.from_reply([b"ok", b"0.250", 3, 1, b"", b"0.100", b"7@a.test", b"{}"])
    assert (reply.wait, reply.added, reply.acked, reply.taken) == (0.25, 3, 1, [("7@a.test", b"{}")])
    assert reply.any_wait == 0.1, "the wait of any lane (a partition's hint), not only this worker's"
    assert Tick.from_reply([b"ok", b"", 0, 0, b"", b"2.000"]).any_wait == 2.0, "only another lane has work"
    assert Tick.from_reply([b"budget", b"", 0, 0]).budget_exhausted and Tick.from_reply([b"paused", b"", 0, 0]).paused
    assert Tick.from_reply([b"budget", b"", 0, 0, b""]).budget_exhausted and Tick.from_reply([b"paused", b"", 0, 0, b""]).paused


def test_a_scripts_key_names_cross_in_keys_in_one_slot_in_the_order_lua_reads_them():
    # #30: the partition's key names go in KEYS (no JSON to decode per call); _ctx.lua reads them by position
    import re

    import redis
    from redis.crc import key_slot

    from crawlhub.frontier.operations import CTX_HEAD, CTX_KEYS, FrontierOps

    lua = scripts.source("_ctx")
    position = {}
    for names, values in re.findall(r"^\s*(ctx\.[\w., ]+?) = (k\[[\d\], k\[]+\])\s*$", lua, re.M):
        for name, value in zip(names.split(", "), values.split(", "), strict=True):
            position[name[len("ctx."):]] = int(value[2:-1])
    assert position == {name: i + 1 for i, name in enumerate(CTX_KEYS)}, "_ctx.lua reads CTX_KEYS by their positions"
    server = redis.Redis(port=1)  # (nothing is sent)
    base = key_names.spider_keys("sp")
    layouts = {"untagged": base.part(0), "grouped one partition": base.with_partitions(1, cluster=True).part(0),
               "placed, 3 of 8": base.with_partitions(8).part(3), "tagged before #30": base.with_partitions(
                   4, placed=False).part(2)}
    for layout, part in layouts.items():
        ops = FrontierOps(server, part, spider="sp")
        names = ops.script_keys
        assert names[0] == part.anchor, layout
        assert names == [ops.ctx[name] for name in CTX_KEYS[:len(names)]], layout
        assert all(names) and not any(ops.ctx.get(name) for name in CTX_KEYS[len(names):]), layout
        if part.tag:
            assert {key_slot(name.encode()) for name in names} == {key_slot(part.anchor.encode())}, layout
        assert set(json.loads(ops.tick_args()[0])["ctx"]) == set(CTX_HEAD), layout
    assert len(FrontierOps(server, layouts["untagged"], spider="sp").script_keys) == len(CTX_KEYS)
    assert len(FrontierOps(server, layouts["grouped one partition"], spider="sp").script_keys) == len(CTX_KEYS) - 1
    assert len(FrontierOps(server, layouts["placed, 3 of 8"], spider="sp").script_keys) == len(CTX_KEYS) - 5


def test_frontier_of_is_none_off_the_shared_frontier():
    crawler = get_crawler(Spider)
    assert frontier_of(crawler) is None, "not started"
    crawler.engine = type("Engine", (), {"scheduler": object()})()
    assert frontier_of(crawler) is None, "another scheduler"


@pytest.mark.parametrize("spider", ["sp", "news"])
def test_every_spider_key_comes_from_the_registry(spider):
    keys = key_names.Keys.for_spider(get_crawler(Spider).settings, spider)
    assert all(name.startswith(f"{spider}:") for name in keys.names().values())
    assert len(set(keys.names().values())) == len(keys.names()), "no two fields name one key"


def test_a_round_reads_the_frontier_epoch_and_judges_it():
    from crawlhub.frontier.epoch import Epoch, judge

    assert Tick.from_reply([b"ok", b"", 0, 0, b""]).epoch is None, "not read"
    assert Tick.from_reply([b"ok", b"", 0, 0, b"e"]).epoch == "", "read: the key is gone"
    assert Tick.from_reply([b"ok", b"", 0, 0, b'e{"id":"x"}']).epoch == '{"id":"x"}'
    known = Epoch.new("created").to_json()
    assert judge(known, None) == "same" and judge(known, known) == "same"
    assert judge(known, Epoch.new("reset").to_json()) == "moved"
    assert judge(known, "") == "vanished", "no key: Redis lost the frontier"
    assert judge(known, Epoch.new("created").to_json()) == "vanished", "made anew by another worker after it vanished"
    assert judge(known, "garbage") == "vanished"


def test_the_local_filter_is_cleared_whole():
    from crawlhub.frontier.dupefilter import RecentFingerprints

    recent = RecentFingerprints(2)
    for key in (1, 2, 3):
        recent.add(key)
    assert 1 in recent and 3 in recent and len(recent) == 3
    recent.clear()
    assert len(recent) == 0 and 1 not in recent


def test_a_failure_is_named_never_with_an_empty_reason():
    from crawlhub._utils.errors import failure_text

    assert failure_text(ValueError("bad markup")) == "ValueError: bad markup"
    assert failure_text(TimeoutError()) == "TimeoutError", "an exception without a message still names itself"
    assert failure_text(OSError("  ")) == "OSError"
    assert len(failure_text(ValueError("x" * 5000), 500)) == 500


def test_a_download_cancelled_for_its_size_says_which_limit():
    from scrapy import Request
    from scrapy.exceptions import DownloadCancelledError
    from twisted.internet.defer import CancelledError

    from crawlhub._utils.errors import download_failure_text

    plain, own = Request("https://127.0.0.1/a"), Request("https://127.0.0.1/b", meta={"download_maxsize": 5000})
    for exc in (DownloadCancelledError(), CancelledError()):
        assert "DOWNLOAD_MAXSIZE (1024 bytes)" in download_failure_text(exc, plain, 1024)
        assert "DOWNLOAD_MAXSIZE (5000 bytes)" in download_failure_text(exc, own, 1024), "the request's own limit"
        assert download_failure_text(exc, plain, 0) == type(exc).__name__, "no limit: no guess"
    said = DownloadCancelledError("Expected to receive 9000 bytes which is larger than download max size (1024)")
    assert download_failure_text(said, plain, 1024) == f"DownloadCancelledError: {said}", "Scrapy's own words kept"
    assert download_failure_text(ValueError("x"), plain, 1024) == "ValueError: x"


def test_a_counted_connection_counts_every_command_it_packs_into_the_crawlers_stats():
    """#30: `crawlhub status` shows each worker's Redis commands per second, counted by its clients' connection
    class: one per command, in a pipeline as alone (here without a socket: a pipeline's packing, and
    get_redis wiring the class into a client's pool with the settings' scheme kept)."""
    from redis.connection import Connection, SSLConnection, UnixDomainSocketConnection
    from scrapy.settings import Settings
    from scrapy.statscollectors import MemoryStatsCollector
    from scrapy.utils.test import get_crawler

    from crawlhub.connection import REDIS_COMMANDS_STAT, counted, get_redis

    stats = MemoryStatsCollector(get_crawler())
    connection = counted(Connection, stats)()
    connection.pack_commands([("GET", "a"), ("SET", "b", "c"), ("EVALSHA", "x", 0)])
    assert stats.get_value(REDIS_COMMANDS_STAT) == 3
    for url, base in [("redis://127.0.0.1:1/0", Connection), ("rediss://127.0.0.1:1/0", SSLConnection),
                      ("unix:///tmp/none.sock", UnixDomainSocketConnection)]:
        pool = get_redis(Settings({"REDIS_URL": url}), stats).connection_pool
        assert issubclass(pool.connection_class, base) and pool.connection_class is not base, url
        assert get_redis(Settings({"REDIS_URL": url})).connection_pool.connection_class is base, "no stats: no count"


def test_the_scheduler_takes_over_the_checks_client_only_for_the_same_redis_settings():
    """#30: `scrapy crawl`'s checks leave their Redis client to the crawler (crawlhub.connection.hand_over); the
    scheduler takes it over (one connection per node, not two) when the crawler's Redis settings are the checks',
    and it counts from then on in the crawler's stats; for other settings it is closed and None is returned (the
    scheduler connects anew). Taken once."""
    from scrapy.settings import Settings
    from scrapy.statscollectors import MemoryStatsCollector
    from scrapy.utils.test import get_crawler

    from crawlhub.connection import REDIS_COMMANDS_STAT, CommandCounter, get_redis, hand_over, take_over

    url = "redis://127.0.0.1:1/0"
    for crawler_url, kept in [(url, True), ("redis://127.0.0.1:2/0", False)]:
        crawler = get_crawler(settings_dict={"REDIS_URL": crawler_url})
        crawler.stats = MemoryStatsCollector(crawler)
        counter = CommandCounter()
        checked = Settings({"REDIS_URL": url})
        server = get_redis(checked, counter)
        counter.add(5)  # (the checks' commands: counted nowhere)
        hand_over(crawler, server, checked, counter)
        taken = take_over(crawler)
        assert (taken is server) is kept and (taken is None) is not kept, crawler_url
        assert take_over(crawler) is None, "handed over once"
        server.connection_pool.connection_class().pack_commands([("GET", "a"), ("GET", "b")])
        assert crawler.stats.get_value(REDIS_COMMANDS_STAT) == (2 if kept else None), crawler_url
