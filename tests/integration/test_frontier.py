"""The frontier's queue and duplicate filters on a real Redis: order, dedup, batching."""


from __future__ import annotations

import hashlib
import json

import pytest
from scrapy.settings import Settings

from crawlhub.frontier.dupefilter import BloomFilter, make_filter, seen_count
from tests.frontier_ops import Frontier, Keys
from tests.helpers import project_settings


def frontier_for(redis_client, **settings) -> Frontier:
    s = Settings(project_settings(**settings))
    keys = Keys.for_spider(s, "sp")
    return Frontier(redis_client, keys, "sp", {"rate": 0}, dupefilter=make_filter(redis_client, s, keys.dupefilter))


def request(n: int, priority: int = 0, domain: str = "a.test") -> tuple:
    url = f"http://{domain}/{n}"
    return (url, json.dumps({"url": url, "priority": priority}), priority, False, "", domain)


def urls(taken) -> list[str]:
    return [json.loads(payload)["url"] for _, payload in taken]


def test_fifo_within_a_priority_and_priority_first(redis_client):
    frontier = frontier_for(redis_client)
    order = [(i, (i * 7) % 3) for i in range(60)]  # priorities 0, 1, 2 interleaved
    frontier.tick([request(i, p) for i, p in order])
    taken = []
    for batch in (1, 5, 7, 60):  # batch sizes do not change the order
        taken += frontier.lease("w", 60, batch)[0]
    expected = [f"http://a.test/{i}" for p in (2, 1, 0) for i, q in order if q == p]
    assert urls(taken) == expected[: len(taken)] and len(taken) == 60


def test_negative_priorities_go_after_zero_whether_queued_with_links_or_when_a_retry_comes_due(redis_client):
    """A priority's score in its domain's priority set is its opposite, written by the scripts as text: a
    negative priority goes after 0 and a positive one before, both where a call's links are written a list at
    a time and where a retry that came due is pushed on its own."""
    frontier = frontier_for(redis_client)
    order = [(i, (-3, 0, 2, -1)[i % 4]) for i in range(20)]
    frontier.tick([request(i, p) for i, p in order])
    assert redis_client.zrange("sp:requests:a.test", 0, -1, withscores=True) == [
        (b"2", -2.0), (b"0", 0.0), (b"-1", 1.0), (b"-3", 3.0)]
    taken = frontier.lease("w", 60, 20)[0]
    assert urls(taken) == [f"http://a.test/{i}" for p in (2, 0, -1, -3) for i, q in order if q == p]
    first = {json.loads(payload)["priority"]: (lease, payload) for lease, payload in reversed(taken)}
    for priority in (-3, 2):  # retries due at once: the lowest first, so that only the score can order them
        assert frontier.delay(first[priority][0], first[priority][1], 0)
    assert [json.loads(payload)["priority"] for _, payload in frontier.lease("w", 60, 5)[0]] == [2, -3]


def test_a_lease_given_back_is_first_in_line(redis_client):
    frontier = frontier_for(redis_client)
    frontier.tick([request(i) for i in range(5)])
    (lease, payload), = frontier.lease("w", 60, 1)[0]
    assert frontier.requeue(lease, payload, 0)
    assert urls(frontier.lease("w", 60, 5)[0]) == [f"http://a.test/{i}" for i in range(5)]


def test_a_queue_that_outlived_its_schedule_is_leased_again_when_a_request_joins_it(redis_client):
    """`crawlhub reset` deletes a frontier key by key while workers push: a domain's list can outlive the
    schedule and priority set that lead to it. A crawl re-seeded after it stalled (nothing leased, no
    error) until a push put the domain back whatever the list's length."""
    frontier = frontier_for(redis_client)
    frontier.tick([request(0)])
    redis_client.delete("sp:domains", "sp:requests:a.test")  # the schedule and the priority set, not the list
    frontier.tick([request(1)])  # a seed after the reset, same domain
    assert sorted(urls(frontier.lease("w", 60, 5)[0])) == ["http://a.test/0", "http://a.test/1"]


def test_one_call_enqueues_acks_and_leases(redis_client):
    frontier = frontier_for(redis_client)
    frontier.tick([request(0)])
    (parent, _), = frontier.lease("w", 60, 1)[0]
    # a page's links and its ack go together, links first; the same call leases them
    result = frontier.tick([request(1), request(2), request(1)], acks=[parent], n=10, worker="w")
    assert (result.added, result.acked) == (2, 1)
    assert urls(result.taken) == ["http://a.test/1", "http://a.test/2"]
    assert redis_client.zcard("sp:inflight") == 2 and seen_count(redis_client, "sp:dupefilter") == 3


def test_exact_filter_is_packed_integers_without_false_positives(redis_client):
    frontier = frontier_for(redis_client, DUPEFILTER_BUCKETS=64)
    batch = [request(i) for i in range(20000)]
    for i in range(0, len(batch), 2000):
        assert frontier.tick(batch[i:i + 2000]).added == 2000, "no false positive among 20,000 URLs"
    assert frontier.tick(batch[:2000]).added == 0, "every duplicate is caught"
    buckets = list(redis_client.scan_iter("sp:dupefilter:*[0-9a-f]"))
    assert len(buckets) == 64
    assert {redis_client.object("encoding", k) for k in buckets} == {b"intset"}
    assert sum(frontier.queued().values()) == 20000 and seen_count(redis_client, "sp:dupefilter") == 20000


def test_bloom_filter_setting(redis_client):
    frontier = frontier_for(redis_client, DUPEFILTER_MODE="bloom", DUPEFILTER_BLOOM_CAPACITY=5000,
                            DUPEFILTER_BLOOM_ERROR_RATE=0.001)
    assert isinstance(frontier.dupefilter, BloomFilter) and frontier.dupefilter.hashes == 10
    assert frontier.tick([request(i) for i in range(3000)]).added >= 2997
    assert frontier.tick([request(i) for i in range(3000)]).added == 0, "a Bloom filter has no false negatives"
    size = redis_client.strlen("sp:dupefilter:bloom")
    assert size == -(-frontier.dupefilter.bits // 8), "the bitmap is made at its full size"
    assert size / 5000 < 2, "under 2 bytes per URL at capacity"


def test_workers_with_other_dupefilter_settings_are_refused(redis_client):
    from crawlhub.frontier.dupefilter import FilterMismatch

    make_filter(redis_client, Settings(project_settings()), "sp:dupefilter")
    make_filter(redis_client, Settings(project_settings()), "sp:dupefilter")  # the same settings: fine
    for other in ({"DUPEFILTER_BUCKETS": 1024}, {"DUPEFILTER_MODE": "bloom"}):
        with pytest.raises(FilterMismatch, match='made with {"buckets": 4096, "mode": "exact"}'):
            make_filter(redis_client, Settings(project_settings(**other)), "sp:dupefilter")


def test_redisbloom_detection_turns_only_a_refusal_into_no_module(redis_url):
    import redis

    from crawlhub.frontier.dupefilter import has_redisbloom

    assert has_redisbloom(redis.Redis.from_url(redis_url)) is False  # Debian's redis-server has no module
    with pytest.raises(redis.ConnectionError):  # a server that is down is not a server without the module
        has_redisbloom(redis.Redis(port=1, socket_connect_timeout=0.5))


def test_stats_counters_are_held_while_redis_is_down(redis_client):
    """Retries, permanent failures, robots refusals, reclaims: counted while Redis is down, sent when it is back."""

    import redis
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    from crawlhub.frontier.client import ClusterCounters
    from crawlhub.services import free_port

    keys = Keys.for_spider(Settings(project_settings()), "sp")
    down = redis.Redis(port=free_port(), socket_connect_timeout=0.2, retry=Retry(NoBackoff(), 0))
    counters = ClusterCounters(down, keys.stats)
    counters.count("retries")
    counters.count("permanent_failures:x.example", 2)
    with pytest.raises(redis.ConnectionError):
        counters.send()
    counters.server = redis_client  # Redis is back
    counters.count("retries")
    counters.send()
    assert redis_client.hgetall("sp:stats") == {b"retries": b"2", b"permanent_failures:x.example": b"2"}
    assert not counters.pending


def client_with(settings: Settings, spider: str, urls: list[str]):
    """A worker's frontier client (worker w1, its stats in memory) of ``spider``, opened, ``urls`` queued:
    (client, stats)."""
    from types import SimpleNamespace

    from scrapy import Request, Spider
    from scrapy.statscollectors import MemoryStatsCollector

    from crawlhub.connection import get_redis
    from crawlhub.frontier.client import FrontierClient

    stats = MemoryStatsCollector(SimpleNamespace(settings=settings))
    frontier = FrontierClient(get_redis(settings), settings, stats, "w1")
    frontier.open(Spider(spider))
    for n, url in enumerate(urls):
        frontier.enqueue(Request(url), hashlib.sha1(str(n).encode()).hexdigest())
    return frontier, stats


def test_a_lease_end_that_redis_did_not_take_is_held_and_sent_when_it_is_back(tmp_path):
    """A dead letter, a retry and a postponement while Redis is down: none raises (Scrapy would log a traceback
    and the page would wait for its lease to expire); each lease stays in the book, renewed, and each end is
    sent, in order, with the first round trip that succeeds."""
    import redis

    from crawlhub.services import EmbeddedRedis

    server = EmbeddedRedis(tmp_path / "redis")
    server.ensure()
    try:
        settings = Settings(project_settings(REDIS_URL=server.url(), REDIS_RETRIES=1, DOMAIN_RATE=0, DOMAIN_CONCURRENCY=0))
        frontier, stats = client_with(settings, "held", [f"https://a.test/{n}" for n in range(4)])
        taken, _ = frontier.lease(4)
        assert len(taken) == 4
        server.stop()
        frontier.dead_letter(taken[0], "HTTP 403 Forbidden (not retried)", status=403)
        assert frontier.retry(taken[1], "TimeoutError") == "retry"
        assert frontier.postpone(taken[2], 30, "robots.txt unreachable") is False
        assert len(frontier.leases) == 4 and len(frontier.held_moves) == 3, "kept, to be renewed"
        server.ensure()  # back from its AOF
        frontier.flush()
        assert not frontier.held_moves and frontier.leases.ids() == [frontier.lease_of(taken[3]).id]
        check = redis.Redis.from_url(server.url())
        (letter,) = [json.loads(r) for r in check.lrange("held:dlq", 0, -1)]
        assert letter["url"] == "https://a.test/0" and letter["status"] == 403 and letter["error"].startswith("HTTP 403")
        assert check.zcard("held:delayed") == 2 and check.zcard("held:inflight") == 1
        assert stats.get_value("dlq/count") == 1 and stats.get_value("retry/count") == 1
        check.close()
    finally:
        server.stop()


def test_an_end_whose_lease_left_the_frontier_is_said_with_where_the_page_is(redis_url, redis_client, caplog):
    """A dead letter, a retry or a postponement whose lease is no longer in the frontier (it expired and was
    reclaimed, or a reset deleted it) is not written: the worker says so, with the URL and where the page is,
    and counts it (frontier/lease_gone). It went without a word before."""
    import logging

    settings = Settings(project_settings(REDIS_URL=redis_url, DOMAIN_RATE=0, DOMAIN_CONCURRENCY=0))
    frontier, stats = client_with(settings, "gone", [f"https://a.test/{n}" for n in range(3)])
    taken, _ = frontier.lease(3)
    assert len(taken) == 3
    redis_client.delete("gone:inflight", "gone:leases")  # (what a reclaim, or a reset, leaves)
    with caplog.at_level(logging.WARNING, logger="crawlhub.frontier.ends"):
        frontier.dead_letter(taken[0], "HTTP 403 Forbidden (not retried)", status=403)
        assert frontier.retry(taken[1], "TimeoutError") == "retry"
        frontier.postpone(taken[2], 30, "robots.txt unreachable")
    said = [r.getMessage() for r in caplog.records if "no longer in the frontier" in r.getMessage()]
    assert [m.split(" (")[0] for m in said] == ["The dead letter", "The retry", "The postponement"], said
    assert all(f"https://a.test/{n}" in said[n] and "queued again" in said[n] and "reset" in said[n] for n in range(3))
    assert stats.get_value("frontier/lease_gone") == 3
    assert redis_client.llen("gone:dlq") == 0 and stats.get_value("dlq/count") is None


@pytest.mark.parametrize("recorded", ["", "3:placed"], ids=["new", "laid-out-by-30"])
def test_a_partitioned_frontier_without_a_budget_counts_nothing_against_one(redis_url, redis_client, recorded):
    """The partitioned round reserved budget only under a budget, but gave back the unused part of every round
    (budget_used went negative, -143 in a crawl): a budget set later then read as negative. A new frontier and one
    laid out by #30 (its budget keys under their own names, "nobudget:budget_used")."""
    from types import SimpleNamespace

    from scrapy import Request, Spider
    from scrapy.statscollectors import MemoryStatsCollector

    from crawlhub.connection import get_redis
    from crawlhub.frontier.client import FrontierClient

    settings = Settings(project_settings(REDIS_URL=redis_url, FRONTIER_PARTITIONS=3, DOMAIN_RATE=0,
                                         DOMAIN_CONCURRENCY=0))
    if recorded:
        redis_client.set("nobudget:partitions", recorded)
    frontier = FrontierClient(get_redis(settings), settings, MemoryStatsCollector(SimpleNamespace(settings=settings)),
                              "w1")
    frontier.open(Spider("nobudget"))
    for n in range(4):
        frontier.enqueue(Request(f"https://d{n}.test/"), hashlib.sha1(str(n).encode()).hexdigest())
    taken = []
    for _ in range(5):
        taken += frontier.lease(16)[0]
    assert len(taken) == 4
    if recorded:  # laid out by #30: the budget keys under their own names
        assert frontier.keys.budget_used == "nobudget:budget_used"
        assert int(redis_client.get("nobudget:budget_used") or 0) == 0
        redis_client.set("nobudget:budget", 6)  # a budget set now counts from now on
    else:  # a new partitioned frontier's budget keys share partition 0's hash tag (#30: the keys of a round grouped)
        assert frontier.keys.budget_used.endswith("}:budget_used") and frontier.keys.budget.endswith("}:budget")
        assert int(redis_client.get(frontier.keys.budget_used) or 0) == 0
        redis_client.set(frontier.keys.budget, 6)  # a budget set now counts from now on
    for n in range(4, 12):
        frontier.enqueue(Request(f"https://d{n}.test/"), hashlib.sha1(str(n).encode()).hexdigest())
    for _ in range(10):
        taken += frontier.lease(16)[0]
    assert len(taken) == 4 + 6 and int(redis_client.get(frontier.keys.budget_used)) == 6
    if recorded:
        assert len(taken) == 4 + 6 and int(redis_client.get("nobudget:budget_used")) == 6


def nobudget_frontier(redis_url, redis_client, recorded: str = ""):
    """A worker's frontier client on 3 partitions with no budget (the layout ``recorded`` first, if given), and the
    4 requests it leased."""
    from types import SimpleNamespace

    from scrapy import Request, Spider
    from scrapy.statscollectors import MemoryStatsCollector

    from crawlhub.connection import get_redis
    from crawlhub.frontier.client import FrontierClient

    settings = Settings(project_settings(REDIS_URL=redis_url, FRONTIER_PARTITIONS=3, DOMAIN_RATE=0,
                                         DOMAIN_CONCURRENCY=0))
    if recorded:
        redis_client.set("nobudget:partitions", recorded)
    frontier = FrontierClient(get_redis(settings), settings, MemoryStatsCollector(SimpleNamespace(settings=settings)),
                              "w1")
    frontier.open(Spider("nobudget"))
    for n in range(4):
        frontier.enqueue(Request(f"https://d{n}.test/"), hashlib.sha1(str(n).encode()).hexdigest())
    taken = []
    for _ in range(5):
        taken += frontier.lease(16)[0]
    return frontier, taken


def lease_eight_more(frontier) -> list:
    from scrapy import Request

    taken = []
    for n in range(4, 12):
        frontier.enqueue(Request(f"https://d{n}.test/"), hashlib.sha1(str(n).encode()).hexdigest())
    for _ in range(10):
        taken += frontier.lease(16)[0]
    return taken


def test_a_new_partitioned_frontier_without_a_budget_counts_nothing_against_one(redis_url, redis_client):
    """The partitioned round reserved budget only under a budget, but gave back the unused part of every round
    (budget_used went negative, -143 in a crawl): a budget set later then read as negative."""
    frontier, taken = nobudget_frontier(redis_url, redis_client)
    assert len(taken) == 4
    # (a partitioned frontier's budget keys share partition 0's hash tag: #30, the keys of a round grouped)
    assert frontier.keys.budget_used.endswith("}:budget_used") and frontier.keys.budget.endswith("}:budget")
    assert int(redis_client.get(frontier.keys.budget_used) or 0) == 0
    redis_client.set(frontier.keys.budget, 6)  # a budget set now counts from now on
    taken += lease_eight_more(frontier)
    assert len(taken) == 4 + 6 and int(redis_client.get(frontier.keys.budget_used)) == 6


def test_a_frontier_laid_out_by_30_without_a_budget_counts_nothing_against_one(redis_url, redis_client):
    """The same on a frontier laid out by #30 (recorded "placed": its budget keys under their own names)."""
    frontier, taken = nobudget_frontier(redis_url, redis_client, "3:placed")
    assert len(taken) == 4
    assert frontier.keys.budget_used == "nobudget:budget_used"
    assert int(redis_client.get("nobudget:budget_used") or 0) == 0
    redis_client.set("nobudget:budget", 6)  # a budget set now counts from now on
    taken += lease_eight_more(frontier)
    assert len(taken) == 4 + 6 and int(redis_client.get("nobudget:budget_used")) == 6


def test_a_pages_next_visit_is_handed_to_the_store_before_its_lease_can_end(redis_url, redis_client):
    """A done page's URL status news (and a 304's) go to the store at once, to be written by the flush that writes
    its items; its lease ends only after that flush. Acked first and written later (as before), a worker killed in
    between left a page acked whose next visit was nowhere: never revisited (test_scenarios, budget + sigkill)."""
    from types import SimpleNamespace

    from scrapy import Request, Spider
    from scrapy.signalmanager import SignalManager
    from scrapy.statscollectors import MemoryStatsCollector

    from crawlhub import intent, meta
    from crawlhub import signals as crawlhub_signals
    from crawlhub.connection import get_redis
    from crawlhub.frontier.client import FrontierClient

    settings = Settings(project_settings(REDIS_URL=redis_url, DOMAIN_RATE=0, DOMAIN_CONCURRENCY=0))
    signals = SignalManager()
    observed: list[object] = []
    signals.connect(lambda updates: observed.extend(updates), signal=crawlhub_signals.status_observed, weak=False)
    frontier = FrontierClient(get_redis(settings), settings, MemoryStatsCollector(SimpleNamespace(settings=settings)),
                              "w1", signals)
    frontier.open(Spider("visits"))
    frontier.leases.wait_for_store = True  # MongoPipeline is in use
    for n in range(2):
        frontier.enqueue(Request(f"https://a.test/{n}"), hashlib.sha1(str(n).encode()).hexdigest())
    (page, not_modified), _ = frontier.lease(2)
    frontier.flush()

    lease = frontier.lease_of(page)
    lease.after_store = ["next visit of /0"]
    lease.output_done = True
    frontier.ends.after_store_flush(lease)  # the page is done
    not_modified.meta[meta.AFTER_STORE] = ["next visit of /1 (304)"]
    assert frontier.ends.end(intent.drop(not_modified, "not modified since the last fetch (304)")) == "dropped"

    assert observed == ["next visit of /0", "next visit of /1 (304)"], "handed to the store at once"
    assert not frontier.pending_ack and redis_client.zcard("visits:inflight") == 2, "neither lease ended yet"
    covered = frontier.leases.take_ready()  # the store's flush begins: it covers both, news included
    assert sorted(covered) == sorted(frontier.leases.ids())
    frontier.ends.finish(covered)  # the flush wrote items and news
    frontier.flush()
    assert redis_client.zcard("visits:inflight") == 0 and len(observed) == 2, "ended once, news not sent twice"


@pytest.mark.parametrize("partitions", [1, 4])
def test_a_forced_request_in_a_call_whose_reply_was_lost_is_queued_once(redis_url, redis_client, partitions):
    """Redis ran a round and its reply was lost (it stopped as it answered): the worker keeps what it sent and sends it
    again. A link the filter has seen is dropped the second time, but a forced one (dont_filter: a seed sent again,
    a page asked for anew) passes the filter by design, and was queued twice: a second fetch. Its id, made when it was
    queued in the worker, tells the second send. Sent twice more (the second reply lost too): still once. The same URL
    forced again later is a new request, queued again."""
    import redis
    from scrapy import Request

    settings = Settings(project_settings(REDIS_URL=redis_url, DOMAIN_RATE=0, DOMAIN_CONCURRENCY=0,
                                         FRONTIER_PARTITIONS=partitions, FRONTIER_LINK_HOLD=0))
    frontier, _ = client_with(settings, "lost", [])
    for n in range(3):
        frontier.enqueue(Request(f"https://a{n}.test/seed", dont_filter=True), hashlib.sha1(b"seed%d" % n).hexdigest())
    frontier.enqueue(Request("https://a0.test/page"), hashlib.sha1(b"page").hexdigest())
    real = frontier.ops.tick
    lost = {"left": 2}

    def reply_lost(*args, **kwargs):
        out = real(*args, **kwargs)  # Redis ran it ...
        if lost["left"]:
            lost["left"] -= 1
            raise redis.ConnectionError("Connection closed by server.")  # ... and its reply never came
        return out

    frontier.ops.tick = reply_lost
    assert frontier.flush() is None and len(frontier.pending_enq) == 4, "kept, to be sent again"
    assert frontier.flush() is None and len(frontier.pending_enq) == 4, "its second reply lost too"
    frontier.flush()
    assert not frontier.pending_enq
    assert frontier.ops.counts()["queued"] == 4, "each request once"
    frontier.enqueue(Request("https://a1.test/seed", dont_filter=True), hashlib.sha1(b"seed1").hexdigest())
    frontier.flush()
    assert frontier.ops.counts()["queued"] == 5, "forced again later: a new request, queued again"
    urls = sorted(json.loads(t.payload)["url"] for t in frontier.ops.tick(n=10, worker="w1").tick.taken)
    assert urls == ["https://a0.test/page", "https://a0.test/seed", "https://a1.test/seed", "https://a1.test/seed",
                    "https://a2.test/seed"]


def test_the_index_of_recently_crawled_domains_keeps_the_latest_thousand_not_every_domain_met(redis_client):
    """`crawlhub:domains` (a partition's `known`) says which domains were crawled last, for `limits show` and
    `status`. A broad crawl meets millions of domains; the index keeps the 1,000 most recent, the latest always."""
    frontier = frontier_for(redis_client)
    frontier.tick([request(0, domain=f"d{i:04}.test") for i in range(1_200)])
    assert len(frontier.lease("w", 60, 1_200)[0]) == 1_200
    assert redis_client.zcard("crawlhub:domains") == 1_000
    frontier.tick([request(1, domain="latest.test")])
    assert len(frontier.lease("w", 60, 1)[0]) == 1
    assert redis_client.zcard("crawlhub:domains") == 1_000
    assert redis_client.zrevrange("crawlhub:domains", 0, 0) == [b"latest.test"]
