"""The partitioned frontier (#17) on a plain Redis: key layout, routing, pause, budget, completion, acks
held across partitions, dead letters and reset over every partition."""


from __future__ import annotations

import json
import threading
import time
import zlib

import pytest
from scrapy.settings import Settings

from crawlhub.frontier import control
from crawlhub.frontier.dupefilter import make_filters
from crawlhub.frontier.partitions import EMPTY, LayoutMismatch, Partitions, claim_layout, frontier_keys
from crawlhub.frontier.records import DeadLetter, EnqueueOp, Finish, lease_domain
from tests.harness import wait_for
from tests.helpers import project_settings
from tests.unit.test_partitions import layout

DOMAINS = [f"site{i}.test" for i in range(12)]




def partitioned(redis_client, partitions: int = 4, **kwargs) -> Partitions:
    keys = layout(partitions)
    claim_layout(redis_client, keys)
    filters = make_filters(redis_client, Settings(project_settings()), keys)
    return Partitions(redis_client, keys, {"rate": 0}, filters=filters, recheck=0.05, **kwargs)


def op(url_id: str, domain: str, ends: str = "", force: bool = False) -> EnqueueOp:
    payload = json.dumps({"url": f"http://{domain}/{url_id}"}).encode()
    return EnqueueOp(zlib.crc32(f"{domain}/{url_id}".encode()).to_bytes(4, "big").hex() * 5, payload, 0, force, ends,
                     domain)


def test_the_layout_is_fixed_for_the_life_of_a_frontier(redis_client):
    claim_layout(redis_client, layout(4))
    claim_layout(redis_client, layout(4))  # the same: fine
    with pytest.raises(LayoutMismatch, match="has 4 partitions .* this worker 8 partitions"):
        claim_layout(redis_client, layout(8))
    assert frontier_keys(redis_client, Settings(project_settings(FRONTIER_PARTITIONS=2)), "sp").partitions == 4
    # a classic crawl in progress is not silently left behind
    redis_client.zadd("other:domains", {"a.test": 0})
    with pytest.raises(LayoutMismatch, match="classic layout"):
        claim_layout(redis_client, layout(4, "other"))
    assert not redis_client.exists("other:partitions")


def test_a_frontier_laid_out_before_the_round_keys_were_grouped_keeps_its_names_through_a_reset(redis_url, redis_client):
    """#30 put the keys every round reads (epoch, pause, budget, hints) under partition 0's hash tag; a frontier
    recorded "placed" (laid out before) keeps them under their own names. A reset deletes the layout record with
    the crawl: the running worker records its layout again with its next round, so that a worker started after
    the reset works on the same keys; a worker that laid the frontier out anew in between stops the old one (two
    sets of names for one crawl would split pause, budget and hints between them)."""
    import hashlib
    from types import SimpleNamespace

    from scrapy import Request, Spider
    from scrapy.statscollectors import MemoryStatsCollector

    from crawlhub.connection import get_redis
    from crawlhub.frontier.client import FrontierClient

    settings = Settings(project_settings(REDIS_URL=redis_url, FRONTIER_PARTITIONS=4, DOMAIN_RATE=0,
                                         DOMAIN_CONCURRENCY=0))

    def worker(name: str) -> FrontierClient:
        frontier = FrontierClient(get_redis(settings), settings, MemoryStatsCollector(SimpleNamespace(settings=settings)),
                                  name)
        frontier.open(Spider("old"))
        return frontier

    redis_client.set("old:partitions", "4:placed")
    a = worker("a")
    assert a.keys.placed and not a.keys.grouped and (a.keys.paused, a.keys.epoch) == ("old:paused", "old:epoch")
    for n in range(3):
        a.enqueue(Request(f"https://d{n}.test/"), hashlib.sha1(str(n).encode()).hexdigest())
    assert len(a.lease(8)[0]) == 3
    control.reset(redis_client, a.keys)
    assert not redis_client.exists("old:partitions") and redis_client.exists("old:epoch")
    taken, _ = a.lease(8)  # (the reset emptied the queue: its round reads the new epoch)
    assert taken == [] and not a.lost
    assert redis_client.get("old:partitions") == b"4:placed", "the running worker recorded its layout again"
    b = worker("b")
    assert b.keys == a.keys
    # a worker that laid the frontier out anew between a reset and the old worker's next round
    control.reset(redis_client, a.keys)
    redis_client.set("old:partitions", "4:grouped")
    lost: list[str] = []
    a.on_lost.append(lost.append)
    a.lease(8)
    assert a.lost and lost == [a.lost] and "'4:grouped'" in a.lost and "'4:placed'" in a.lost


def test_links_go_to_their_domains_partitions_and_every_request_is_leased_once(redis_client):
    parts = partitioned(redis_client)
    ops = [op(str(i), DOMAINS[i % len(DOMAINS)]) for i in range(120)]
    first = parts.tick(ops)
    assert first.tick.added == 120 and not first.failed
    assert parts.tick(ops).tick.added == 0, "the duplicate filter holds in every partition"
    counts = parts.counts()
    assert counts["queued"] == 120 and counts["seen"] == 120
    used = {p for p in range(4) if redis_client.exists(parts.keys.part(p).queued)}
    assert len(used) >= 3, used
    for d in DOMAINS:  # a domain's queue is in its own partition only
        p = parts.keys.partition_of(d)
        assert redis_client.hexists(parts.keys.part(p).queued, d)
        assert not any(redis_client.hexists(parts.keys.part(q).queued, d) for q in range(4) if q != p)
    taken: list[str] = []
    for _ in range(200):
        got = parts.tick(n=16, worker="w").tick
        taken += [t.lease_id for t in got.taken]
        if len(taken) == 120:
            break
    assert len(taken) == len(set(taken)) == 120
    assert parts.pending() is False and parts.counts()["inflight"] == 120
    parts.tick(acks=taken)
    assert parts.counts()["inflight"] == 0


def test_an_ack_waits_one_round_for_links_queued_in_another_partition(redis_client):
    parts = partitioned(redis_client)
    a, b = next((x, y) for x in DOMAINS for y in DOMAINS if parts.keys.partition_of(x) != parts.keys.partition_of(y))
    parts.tick([op("parent", a)])
    lease = parts.tick(n=1, worker="w").tick.taken[0].lease_id
    result = parts.tick([op("child", b)], acks=[lease])
    assert result.deferred_ack == [lease], "the ack must not race the link into another partition"
    assert parts.counts()["inflight"] == 1 and parts.counts()["queued"] == 1
    parts.tick(safe_acks=result.deferred_ack)
    assert parts.counts()["inflight"] == 0
    # links into the lease's own partition: one script, no wait
    parts.tick([op("sibling", a)])
    lease = next(t.lease_id for t in parts.tick(n=5, worker="w").tick.taken if lease_domain(t.lease_id) == a)
    assert parts.tick([op("same", a)], acks=[lease]).deferred_ack == []


def test_pause_reaches_every_partition_and_resume_lets_them_lease(redis_client):
    parts = partitioned(redis_client)
    parts.tick([op(str(i), DOMAINS[i % len(DOMAINS)]) for i in range(24)])
    control.pause(redis_client, parts.keys)
    paused = parts.tick(n=24, worker="w").tick
    assert paused.paused and paused.taken == []
    assert control.resume(redis_client, parts.keys)
    assert len(parts.tick(n=24, worker="w").tick.taken) > 0


def test_a_round_leases_ahead_over_the_partitions_it_asks(redis_client):
    parts = partitioned(redis_client, partitions=4)
    parts.tick([op(str(i), DOMAINS[i % len(DOMAINS)]) for i in range(200)])
    got = parts.tick(n=8, worker="w", ahead=8).tick
    assert 8 < len(got.taken) <= 16 + 3, "n, and ahead shared as n is (rounded up per partition)"
    assert len({t.lease_id for t in got.taken}) == len(got.taken)


@pytest.mark.parametrize("ahead", [0, 8])
def test_the_budget_is_never_exceeded_by_concurrent_workers(redis_client, ahead):
    parts = [partitioned(redis_client) for _ in range(4)]
    parts[0].tick([op(str(i), DOMAINS[i % len(DOMAINS)]) for i in range(300)])
    control.budget(redis_client, parts[0].keys, 0, pages=50)
    taken: list[str] = []
    lock = threading.Lock()

    def work(p: Partitions) -> None:
        for _ in range(60):
            got = p.tick(n=7, worker="w", ahead=ahead).tick
            with lock:
                taken.extend(t.lease_id for t in got.taken)
            if got.budget_exhausted:
                return

    threads = [threading.Thread(target=work, args=(p,)) for p in parts]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(taken) == 50, f"{len(taken)} leased under a budget of 50"
    assert int(redis_client.get(parts[0].keys.budget_used)) == 50
    assert parts[0].tick(n=5, worker="w").tick.budget_exhausted


def test_a_budget_another_round_has_reserved_is_not_used_up(redis_client, monkeypatch):
    """A partitioned round reserves its share of a budget before it leases. In the CI failure, a worker whose
    round came while another round held the whole rest of a budget of 10 (1 page of it leased) read the budget
    as used up and closed as budget_exhausted; then so did the other: the crawl ended after one page."""
    from crawlhub.frontier import partitions as module

    first, second = partitioned(redis_client), partitioned(redis_client)
    first.tick([op(str(i), DOMAINS[i % len(DOMAINS)]) for i in range(40)])
    control.budget(redis_client, first.keys, 0, pages=10)
    run = module.run_scripts
    during: list = []
    started: list[bool] = []

    def second_round_meanwhile(server, calls, *args, **kwargs):
        if calls and not started:  # the first round's calls: its reservation is held
            started.append(True)
            during.append(second.tick(n=7, worker="w2").tick)
        return run(server, calls, *args, **kwargs)

    monkeypatch.setattr(module, "run_scripts", second_round_meanwhile)
    got = first.tick(n=32, worker="w1").tick
    monkeypatch.setattr(module, "run_scripts", run)
    assert len(got.taken) == 10
    assert during and not during[0].budget_exhausted and during[0].taken == [], \
        "the rest of the budget was only reserved by the other round: not used up"
    assert int(redis_client.get(first.keys.budget_used)) == 10 and redis_client.zcard(first.keys.budget_held) == 0
    assert second.tick(n=7, worker="w2").tick.budget_exhausted, "all 10 taken: used up now"

    control.budget(redis_client, first.keys, 0, pages=14)  # raised: the two rounds share what is left
    shared = [first.tick(n=3, worker="w1").tick, second.tick(n=3, worker="w2").tick]
    assert [len(t.taken) for t in shared] == [3, 1] and shared[1].budget_exhausted is False
    assert second.tick(n=3, worker="w2").tick.budget_exhausted


def test_a_budget_reservation_of_a_worker_killed_mid_round_lapses(redis_client):
    parts = partitioned(redis_client)
    parts.tick([op(str(i), DOMAINS[i % len(DOMAINS)]) for i in range(40)])
    control.budget(redis_client, parts.keys, 0, pages=10)
    redis_client.zadd(parts.keys.budget_held, {"10\tkilled": time.time() + 0.5})  # its round never ended
    assert parts.tick(n=5, worker="w", ttl=30).tick.taken == []
    assert wait_for(lambda: len(parts.tick(n=5, worker="w", ttl=30).tick.taken) == 5, 5)
    assert int(redis_client.get(parts.keys.budget_used)) == 5


def test_a_redirect_to_a_domain_of_another_partition_ends_its_lease_once_the_new_request_is_queued(redis_client):
    """A replacement's own partition cannot end a lease of another: the lease stayed in flight until it expired
    (LEASE_TTL), was reclaimed, and its page fetched again."""
    from crawlhub.frontier.keys import partition_of

    parts = partitioned(redis_client)
    a = DOMAINS[0]
    b = next(d for d in DOMAINS if partition_of(d, 4) != partition_of(a, 4))
    parts.tick([op("1", a), op("0", b)])
    (lease,) = [t for t in parts.tick(n=2, worker="w").tick.taken if lease_domain(t.lease_id) == a]
    inflight = parts.keys.part(partition_of(a, 4)).inflight
    first = parts.tick([op("moved", b, ends=lease.lease_id)])
    assert redis_client.zscore(inflight, lease.lease_id) is not None and first.deferred_ack == [lease.lease_id], \
        "ended in a round after the one that queues its replacement"
    parts.tick(safe_acks=first.deferred_ack)  # (the client's next round)
    assert redis_client.zcard(inflight) == 0 and redis_client.hlen(parts.keys.part(partition_of(a, 4)).leases) == 0
    queue = f"{parts.keys.part(partition_of(b, 4)).queue}:{b}:0"
    assert b"moved" in redis_client.lindex(queue, 0), "first out of its queue, as the page it replaces"


def test_a_replacement_sent_again_or_after_its_lease_was_reclaimed_queues_no_second_copy(redis_client):
    """A tick whose reply was lost (Redis stopped as it answered: the CI failure, a fault of "aof") is sent again by
    its worker: its forced replacement of a lease (another rung, the browser, another proxy) was queued twice, and
    the page dead-lettered twice. A lease reclaimed before its replacement came: its page is queued already."""
    parts = partitioned(redis_client)
    d = DOMAINS[0]
    parts.tick([op("1", d), op("2", d)])
    one, two = parts.tick(n=2, worker="w").tick.taken
    again = op("1", d, ends=one.lease_id, force=True)
    assert parts.tick([again]).tick.added == 1
    assert parts.tick([again]).tick.added == 0, "sent again: its lease ended already"
    part = parts.keys.part(parts.keys.partition_of(d))
    redis_client.zadd(part.inflight, {two.lease_id: 1})  # expired long ago
    (expired,) = parts.expired(10)
    assert expired.lease_id == two.lease_id and parts.requeue(two.lease_id, two.payload, 0)  # (the warden's reclaim)
    assert parts.tick([op("2", d, ends=two.lease_id, force=True)]).tick.added == 0, "reclaimed: queued by then"
    assert parts.counts()["queued"] == 2 and parts.counts()["inflight"] == 0


def test_completion_waits_for_every_partition(redis_client):
    parts = partitioned(redis_client, partitions=6)
    assert not parts.pending()
    last = DOMAINS[-1]
    parts.tick([op("only", last)])
    assert parts.pending(), "one request in one partition of six is pending work"
    lease = parts.tick(n=1, worker="w").tick.taken[0].lease_id
    assert not parts.pending() and parts.counts()["inflight"] == 1
    parts.delay(lease, b'{"url": "http://x/"}', 0.2)
    assert parts.pending(), "a retry waiting in its partition is pending work"


def sent_by(redis_client, call) -> tuple[object, dict[str, int]]:
    """``call()``'s result, and the commands it sent (INFO commandstats: name -> calls)."""
    redis_client.config_resetstat()
    result = call()
    stats = redis_client.info("commandstats")
    return result, {name.removeprefix("cmdstat_"): int(v["calls"]) for name, v in stats.items()
                    if not name.startswith(("cmdstat_config", "cmdstat_info"))}


@pytest.mark.parametrize("partitions", [1, 6])
def test_what_is_left_is_one_exists_on_a_plain_redis_and_sees_queued_in_flight_retries_and_every_lane(
        redis_client, partitions):
    """What an idle worker asks before it may close (left: no hint read, so that a dead worker's leases or links
    whose mark was lost keep it) sees work queued, in flight, waiting to retry or queued in a lane only, in any
    partition. On a plain Redis it is one EXISTS over every partition's keys: a ZCARD a key before (#30: 240
    commands at 48 partitions, a worker's start and idle checks most of a short crawl's commands). The start's
    message reads only what it says: the URLs seen, a GET a partition."""
    parts = partitioned(redis_client, partitions=partitions)
    last = DOMAINS[-1]

    def left() -> bool:
        found, sent = sent_by(redis_client, parts.left)
        assert sent == {"exists": 1}, sent
        return bool(found)

    assert not left(), "a new frontier: nothing left"
    parts.tick([op("only", last)])
    assert left(), "a request queued"
    lease = parts.tick(n=1, worker="w").tick.taken[0].lease_id
    assert left() and parts.counts()["queued"] == 0, "a request in flight only"
    assert parts.delay(lease, b'{"url": "http://x/"}', 30)
    assert left() and parts.counts(("delayed", "inflight")) == {"delayed": 1, "inflight": 0}, "a retry waiting only"
    control.reset(redis_client, parts.keys)
    assert not left(), "reset: nothing left"
    parts.tick([op("rendered", f"{DOMAINS[0]}#browser")])
    assert redis_client.exists(f"{parts.ops[parts.keys.partition_of(DOMAINS[0])].keys.schedule}:browser")
    assert left(), "a request in the browser lane only"
    seen, sent = sent_by(redis_client, lambda: parts.counts(("seen",)))
    assert seen == {"seen": 1} and sent == {"get": partitions}, (seen, sent)
    assert parts.counts(("seeds",)) == {"seeds": 0} and set(parts.counts()) == {"seeds", "queued", "delayed",
                                                                                "inflight", "dlq", "seen"}


def test_dead_letters_requeue_and_reset_span_every_partition(redis_client):
    parts = partitioned(redis_client)
    ops = [op(str(i), d) for i, d in enumerate(DOMAINS)]
    parts.tick(ops)
    leases = []
    for _ in range(20):
        leases += parts.tick(n=12, worker="w").tick.taken
        if len(leases) == 12:
            break
    for t in leases:
        d = lease_domain(t.lease_id)
        letter = DeadLetter(f"http://{d}/x", "sp", 3, 500, "HTTP 500", 1.0, 2.0, "w", t.payload.decode())
        assert parts.dead_letter(t.lease_id, letter)
    letters = control.dead_letters(redis_client, parts.keys)
    assert len(letters) == 12 and len({p for p in range(4) if redis_client.llen(parts.keys.part(p).dlq)}) >= 3
    raw, letter = letters[0]
    assert control.requeue_dead_letter(redis_client, parts.keys, raw, letter)
    assert len(control.dead_letters(redis_client, parts.keys)) == 11 and parts.counts()["queued"] == 1
    assert control.reset(redis_client, parts.keys) > 0
    assert redis_client.keys("*sp*") == [], redis_client.keys("*sp*")


@pytest.mark.parametrize("recorded", ["", "4:placed"], ids=["new", "laid-out-by-30"])
def test_two_workers_crawl_several_sites_through_partitions_on_a_plain_redis(env, site, redis_client, mongo_db,
                                                                              tmp_path, recorded):
    """FRONTIER_PARTITIONS on one Redis (to test, or to prepare a move to a cluster): the same crawl. A new frontier,
    and one laid out by #30 (recorded "4:placed": the keys of a round under their own names) that workers of today
    crawl on."""
    from collections import Counter

    from tests.harness import run_workers
    from tests.sites.shop import shop_pages

    shops = [site(shop_pages(20 * 4, 4, first_id=1000 * (i + 1)), delay=0.05) for i in range(3)]
    for shop in shops:
        redis_client.lpush("scrapeme:start_urls", f"{shop.url}/shop/")
    if recorded:
        redis_client.set("scrapeme:partitions", recorded)
    run_workers("scrapeme", {**env, "FRONTIER_PARTITIONS": "4"}, tmp_path, 2, CONCURRENT_REQUESTS=4)
    for shop in shops:
        fetched = Counter(shop.fetched("/shop"))
        assert set(fetched) == set(shop.pages) and max(fetched.values()) == 1, fetched
    ids = Counter(d["id"] for d in mongo_db.products.find({}, {"id": 1}))
    assert len(ids) == 3 * 80 and max(ids.values()) == 1
    if recorded:
        assert redis_client.get("scrapeme:partitions") == b"4:placed"  # (#30: "4:tagged" before the tags were placed)
        assert redis_client.exists("scrapeme:epoch") and redis_client.exists("scrapeme:ready")
    else:  # ("4:placed" before the keys of a round were grouped)
        assert redis_client.get("scrapeme:partitions") == b"4:grouped"
        assert not redis_client.exists("scrapeme:epoch") and not redis_client.exists("scrapeme:ready")
    assert not redis_client.exists("scrapeme:requests", "scrapeme:inflight", "scrapeme:domains")
    assert any(k.startswith(b"{scrapeme:") for k in redis_client.keys("*"))


def crawl_three_shops(env, site, redis_client, mongo_db, tmp_path, recorded: str = "") -> None:
    """Two workers crawl 3 shops through 4 partitions on one Redis (the layout ``recorded`` first, if given):
    every page fetched once, every product stored once."""
    from collections import Counter

    from tests.harness import run_workers
    from tests.sites.shop import shop_pages

    shops = [site(shop_pages(20 * 4, 4, first_id=1000 * (i + 1)), delay=0.05) for i in range(3)]
    for shop in shops:
        redis_client.lpush("scrapeme:start_urls", f"{shop.url}/shop/")
    if recorded:
        redis_client.set("scrapeme:partitions", recorded)
    run_workers("scrapeme", {**env, "FRONTIER_PARTITIONS": "4"}, tmp_path, 2, CONCURRENT_REQUESTS=4)
    for shop in shops:
        fetched = Counter(shop.fetched("/shop"))
        assert set(fetched) == set(shop.pages) and max(fetched.values()) == 1, fetched
    ids = Counter(d["id"] for d in mongo_db.products.find({}, {"id": 1}))
    assert len(ids) == 3 * 80 and max(ids.values()) == 1


def test_two_workers_crawl_several_sites_through_partitions_of_a_new_frontier_on_a_plain_redis(env, site, redis_client, mongo_db,
                                                                              tmp_path):
    """FRONTIER_PARTITIONS on one Redis (to test, or to prepare a move to a cluster): the same crawl."""
    crawl_three_shops(env, site, redis_client, mongo_db, tmp_path)
    # (#30: "4:tagged" before the tags were placed, "4:placed" before the keys of a round were grouped)
    assert redis_client.get("scrapeme:partitions") == b"4:grouped"
    assert not redis_client.exists("scrapeme:epoch") and not redis_client.exists("scrapeme:ready")
    assert not redis_client.exists("scrapeme:requests", "scrapeme:inflight", "scrapeme:domains")
    assert any(k.startswith(b"{scrapeme:") for k in redis_client.keys("*"))


def test_two_workers_crawl_a_frontier_laid_out_by_30_through_partitions_on_a_plain_redis(env, site, redis_client,
                                                                                         mongo_db, tmp_path):
    """A frontier laid out by #30 (recorded "4:placed": the keys of a round under their own names), which workers
    of today crawl on, keeping its names."""
    crawl_three_shops(env, site, redis_client, mongo_db, tmp_path, recorded="4:placed")
    assert redis_client.get("scrapeme:partitions") == b"4:placed"  # (#30: "4:tagged" before the tags were placed)
    assert redis_client.exists("scrapeme:epoch") and redis_client.exists("scrapeme:ready")
    assert not redis_client.exists("scrapeme:requests", "scrapeme:inflight", "scrapeme:domains")
    assert any(k.startswith(b"{scrapeme:") for k in redis_client.keys("*"))


def test_a_round_reads_the_filter_first_and_sends_only_links_it_does_not_hold(redis_client):
    parts = partitioned(redis_client, partitions=1)  # the classic layout reads first too
    seen_before = op("old", "a.test")
    parts.tick([seen_before])
    new, forced = op("new", "a.test"), op("old", "a.test", force=True)
    kept = parts.unknown([seen_before, new, forced])
    assert kept == [new, forced], "a link the filter holds stays in the worker; a forced request always goes"
    result = parts.tick([seen_before, new, forced])
    assert result.tick.added == 2 and parts.counts()["queued"] == 3 and parts.counts()["seen"] == 2


# -- the hints (#30): an idle worker reads one key, and a hint never hides work -------------------------------
def test_the_hint_script_sets_only_over_what_it_read_and_a_mark_always_moves_it(redis_client):
    parts = partitioned(redis_client, partitions=3)
    ready = parts.keys.ready
    redis_client.delete(ready)

    def hint(*entries):
        return parts._hint(keys=[ready], args=parts._hint_args(list(entries)))

    assert hint((0, None, 100.0, "set")) == 1, "absent and expected absent: written"
    assert hint((0, None, 50.0, "set")) == 0, "expected absent but there: kept"
    assert hint((0, 99.0, 50.0, "set")) == 0 and redis_client.zscore(ready, "0") == 100.0, "another score read: kept"
    assert hint((0, 100.0, 1e10 + 5, "set")) == 1, "the score it read: written (empty)"
    assert hint((0, None, 200.0, "mark")) == 1 and redis_client.zscore(ready, "0") == 200.0, "a mark lowers an empty hint"
    assert hint((0, None, 300.0, "mark")) == 1
    moved = redis_client.zscore(ready, "0")
    assert moved < 200.0, "a mark over an earlier hint moves it (a hair earlier), so a set that read 200 is refused"
    assert hint((0, 200.0, 1e10 + 5, "set")) == 0 and redis_client.zscore(ready, "0") == moved
    assert hint((0, 200.0, 150.0, "add")) == 1 and redis_client.zscore(ready, "0") == 150.0, "add lowers when it moved"
    assert hint((0, 1.0, 1e10 + 9, "add")) == 0, "...and never raises"


def test_partitions_with_no_hint_are_probed_and_hinted_from_what_they_hold_not_leased_from(redis_client):
    """A new frontier or a hint lost in a failover: every partition without a hint is probed with the round (a
    small script each) and hinted, and the round's n goes to the partitions that have work."""
    parts = partitioned(redis_client, partitions=6)
    parts.tick([op(str(i), DOMAINS[0]) for i in range(10)])
    busy = parts.keys.partition_of(DOMAINS[0])
    redis_client.delete(parts.keys.ready)  # every hint lost
    first = parts.tick(n=4, worker="w").tick
    assert first.taken == [] and first.wait == 0.0, "nothing was hinted ready: none leased, and it asks again at once"
    hints = {int(m): s for m, s in redis_client.zrange(parts.keys.ready, 0, -1, withscores=True)}
    assert set(hints) == set(range(6)), "every partition hinted"
    assert [p for p, s in hints.items() if s < EMPTY] == [busy], hints
    assert len(parts.tick(n=4, worker="w").tick.taken) == 4, "the whole n from the partition with work"


def test_an_empty_partition_is_not_pending_and_every_write_that_adds_work_makes_it_so(redis_client):
    parts = partitioned(redis_client, partitions=6)
    assert not parts.pending(), "a new frontier: every partition hinted empty"
    assert redis_client.zcard(parts.keys.ready) == 6
    parts.tick([op("a", DOMAINS[0])])
    assert parts.pending(), "links queued: their partition is hinted"
    taken = []
    for _ in range(5):
        taken += parts.tick(n=4, worker="w").tick.taken
        if taken and not parts.pending():
            break
    assert len(taken) == 1 and not parts.pending(), "all leased: the partition's hint says empty again"
    assert parts.delay(taken[0].lease_id, b'{"url": "http://site0.test/a"}', 30)
    assert parts.pending(), "a retry due in 30 s is work (hinted for then)"
    wait = parts.tick(n=4, worker="w")
    assert not wait.tick.taken and wait.tick.waiting and 25 < (wait.tick.wait or 0) <= 30


def test_hints_are_whole_milliseconds_and_an_older_workers_hints_in_seconds_are_asked_and_hinted_anew(redis_client):
    """#30: a hint's score is an integral number of milliseconds (Redis stores and sends one without formatting a
    double). Hints an older worker wrote in seconds, even "empty" ones, read as long past: their partitions are
    asked, their work is leased, and every hint is written anew in milliseconds."""
    parts = partitioned(redis_client, partitions=6)
    parts.tick([op(str(i), DOMAINS[0]) for i in range(8)])
    busy = parts.keys.partition_of(DOMAINS[0])
    assert len(parts.tick(n=2, worker="w").tick.taken) == 2
    hints = {int(m): s for m, s in redis_client.zrange(parts.keys.ready, 0, -1, withscores=True)}
    assert all(s == int(s) for s in hints.values()), hints
    assert abs(hints[busy] - time.time() * 1000) < 60_000, "the busy partition: ready now, in milliseconds"
    # an older worker's hints: every partition "empty" (1e10 and above, in seconds), asked again in a minute
    redis_client.zadd(parts.keys.ready, {str(p): 1e10 + time.time() + 60 for p in range(6)})
    assert parts.pending(), "seconds read as milliseconds are long past: work may be there"
    taken = []
    for _ in range(6):  # (a round asks FRONTIER_PARTITIONS_PER_LEASE of the ready partitions, in random order)
        taken += parts.tick(n=6, worker="w").tick.taken
        if len(taken) == 6:
            break
    assert len(taken) == 6, "the busy partition's work was leased, not hidden for a minute by an old hint"
    hints = {int(m): s for m, s in redis_client.zrange(parts.keys.ready, 0, -1, withscores=True)}
    assert hints[busy] >= EMPTY and hints[busy] == int(hints[busy]), "all leased: hinted empty, in milliseconds"


def test_a_round_that_finds_a_ready_partition_ready_still_writes_no_hint(redis_client):
    """#30: the hint says "ready" and the round's tick found work there still (and queued no links there): there is
    nothing to write, and a busy round sends no hint script; one that empties the partition says so."""
    from crawlhub.frontier.partitions import hint_ms

    parts = partitioned(redis_client, partitions=4)
    parts.tick([op(str(i), DOMAINS[0]) for i in range(6)])
    busy, ready = parts.keys.partition_of(DOMAINS[0]), parts.keys.ready
    assert len(parts.tick(n=2, worker="w").tick.taken) == 2
    before = redis_client.zscore(ready, str(busy))
    assert before < EMPTY
    assert wait_for(lambda: hint_ms(time.time()) > before, 2), "a millisecond passes: a hint written now would differ"
    assert len(parts.tick(n=2, worker="w").tick.taken) == 2
    assert redis_client.zscore(ready, str(busy)) == before, "ready and ready still: the hint as it was"
    assert len(parts.tick(n=4, worker="w").tick.taken) == 2
    assert redis_client.zscore(ready, str(busy)) >= EMPTY, "the round that emptied it hinted it empty"


@pytest.mark.parametrize("when", ["between its read and its tick", "between its tick and its hint write"])
def test_a_round_that_found_a_partition_empty_never_hides_links_another_worker_queued(redis_client, when):
    """Worker A leases the only request of a partition and finds it empty; worker B queues a link there at
    the worst moment. A's "empty" must not win: the link is pending and leased by the next round."""
    a = partitioned(redis_client, partitions=4)
    b = partitioned(redis_client, partitions=4)
    domain = DOMAINS[0]
    a.tick([op("first", domain)])
    inject = "_prepare" if when == "between its read and its tick" else "_after"
    original = getattr(a, inject)

    def with_b_in_between(*args, **kwargs):
        if inject == "_prepare":
            out = original(*args, **kwargs)
            b.tick([op("second", domain)])
            return out
        b.tick([op("second", domain)])
        return original(*args, **kwargs)

    setattr(a, inject, with_b_in_between)
    got = a.tick(n=1, worker="a").tick.taken
    setattr(a, inject, original)
    assert len(got) == 1
    assert a.pending(), f"B's link queued {when} is hinted as work"
    more = []
    for _ in range(3):
        more += a.tick(n=4, worker="a").tick.taken
    assert len(got) + len(more) == 2, "both requests leased: nothing hidden behind an 'empty' hint"
    assert not a.pending()


def test_the_reclaims_shares_cover_every_partition_in_consecutive_turns(redis_client):
    """#30: a reclaim scan looks at LEASE_RECLAIM_INTERVAL / LEASE_TTL of the partitions (5 s / 60 s: 4 of 48), the
    next share at each turn (counted in Redis, <spider>:reclaim_turn): 12 consecutive turns see every partition's
    expired leases, whatever turn they start from."""
    from tests.harness import wait_for

    parts = partitioned(redis_client, partitions=48)
    by_partition: dict[int, str] = {}
    i = 0
    while len(by_partition) < 48:
        by_partition.setdefault(parts.keys.partition_of(f"d{i}.test"), f"d{i}.test")
        i += 1
    assert parts.tick([op("a", d) for d in by_partition.values()]).tick.added == 48
    taken = []
    for _ in range(60):
        taken += parts.tick(n=48, worker="dead", ttl=0.01).tick.taken
        if len(taken) == 48:
            break
    assert len(taken) == 48
    assert wait_for(lambda: len(parts.expired(limit=1000)) == 48, 5), "every short lease expires (within the second)"
    for start in (1, 7, 12345):
        seen: set[str] = set()
        for turn in range(start, start + 12):
            found = {e.lease_id for e in parts.expired(limit=1000, share=5 / 60, turn=turn)}
            assert len({lease_domain(x) for x in found}) <= 4, "one share: 4 partitions"
            seen |= found
        assert seen == {t.lease_id for t in taken}, f"from turn {start}: {48 - len(seen)} partitions never looked at"


def test_balance_is_refused_where_there_is_nothing_to_balance(env, redis_client):
    """`crawlhub partitions --balance` on one Redis (every partition on one server): exit 2, one line that says why,
    nothing touched."""
    from tests.harness import cli

    claim_layout(redis_client, layout(8, "scrapeme"))
    before = sorted(redis_client.keys("*"))
    out = cli(env, "partitions", "scrapeme", "--balance", "--yes")
    assert out.returncode == 2, out.stdout + out.stderr
    assert "--balance is for a partitioned frontier on a Redis Cluster" in out.stderr and "Traceback" not in out.stderr
    assert sorted(redis_client.keys("*")) == before


def test_a_round_stops_reading_the_filter_first_while_few_links_are_duplicates_and_reads_again_when_many_are(redis_client):
    """The read first (SISMEMBER per link) pays only when many links are duplicates: a worker whose links are
    new sends them straight to the round, and the round's count of new links brings the read back."""
    parts = partitioned(redis_client, partitions=1)

    def sismembers() -> int:
        return int(redis_client.info("commandstats").get("cmdstat_sismember", {}).get("calls", 0))

    assert parts.duplicates.worth_reading(), "a new worker reads first"
    for r in range(20):  # every link new
        parts.tick([op(f"new{r}-{i}", "a.test") for i in range(8)])
    assert not parts.duplicates.worth_reading()
    before = sismembers()
    result = parts.tick([op(f"later{i}", "a.test") for i in range(8)])
    assert sismembers() == before, "links that are mostly new go without the read"
    assert result.tick.added == 8
    # now the site repeats itself: every link is one the filter holds; sent unread, the script still drops them
    again = [op(f"new{r}-{i}", "a.test") for r in range(20) for i in range(8)]
    queued = parts.counts()["queued"]
    rounds = 0
    while not parts.duplicates.worth_reading():
        result = parts.tick(again[rounds * 8:(rounds + 1) * 8])
        assert result.tick.added == 0, "a duplicate sent unread is still not queued twice"
        rounds += 1
        assert rounds < 20, "the round's count of new links did not bring the read back"
    assert parts.counts()["queued"] == queued
    before = sismembers()
    kept = parts.unknown(again[:8])
    assert kept == [] and sismembers() == before + 8, "read first again: duplicates stay in the worker"


def two_partitions_apart(parts: Partitions) -> tuple[str, str]:
    return next((x, y) for x in DOMAINS for y in DOMAINS if parts.keys.partition_of(x) != parts.keys.partition_of(y))


def holding_worker(redis_client, **kwargs) -> tuple[Partitions, str, str, str]:
    """A worker whose rounds lease from a's partition only (busy: each gets all it asks), with one lease of a held.
    Each of its rounds reports a download of a as over (``done(a)``), as a worker's do: a's partition is called anyway,
    so the round leases from it first."""
    parts = partitioned(redis_client, per_lease=1, **kwargs)
    a, b = two_partitions_apart(parts)
    parts.tick([op(str(i), a) for i in range(40)])
    lease = parts.tick(n=2, worker="w").tick.taken[0].lease_id
    return parts, a, b, lease


def done(domain: str) -> list[Finish]:
    return [Finish(domain, "", "ok")]


def queued_in(parts: Partitions, redis_client, domain: str) -> int:
    return int(redis_client.hget(parts.keys.part(parts.keys.partition_of(domain)).queued, domain) or 0)


def test_links_for_a_partition_the_round_does_not_call_wait_with_the_acks_until_enough_are_pending(redis_client):
    parts, a, b, lease = holding_worker(redis_client, link_hold=60.0, link_batch=3)
    inflight = parts.counts()["inflight"]
    result = parts.tick([op("child0", b)], done(a), acks=[lease], n=2, worker="w")
    assert len(result.tick.taken) == 2 and result.deferred_ack == []
    assert queued_in(parts, redis_client, b) == 0 and parts.holding, "b's partition is not called: its link waits"
    assert parts.counts()["inflight"] == inflight + 2, "and the ack with it: a page ends when its links are queued"
    parts.tick([op("child1", b)], done(a), n=2, worker="w")
    assert queued_in(parts, redis_client, b) == 0
    result = parts.tick([op("child2", b)], done(a), n=2, worker="w")  # 3 pending there: worth a call of their own
    assert queued_in(parts, redis_client, b) == 3 and result.held_sent == 2 and not parts.holding
    assert result.deferred_ack == [lease], "the ack goes one round after the links, as any ack across partitions"
    parts.tick(safe_acks=result.deferred_ack)
    assert redis_client.zscore(parts.keys.part(parts.keys.partition_of(a)).inflight, lease) is None
    # links for the partition the round leases from go with it
    before = queued_in(parts, redis_client, a)
    got = parts.tick([op("sibling", a), op("sibling", b)], done(a), n=2, worker="w").tick
    assert {lease_domain(t.lease_id) for t in got.taken} == {a}
    assert queued_in(parts, redis_client, a) == before + 1 - len(got.taken)
    assert parts.holding, "the other partition's link waits"


@pytest.mark.parametrize("why", ["short of work", "hold elapsed", "closing"])
def test_held_links_go_when_the_worker_runs_short_of_work_the_hold_elapses_or_it_closes(redis_client, why):
    parts, a, b, lease = holding_worker(redis_client, link_hold=0.3 if why == "hold elapsed" else 60.0)
    parts.tick([op("child", b)], done(a), acks=[lease], n=2, worker="w")
    assert parts.holding and queued_in(parts, redis_client, b) == 0
    if why == "short of work":
        parts.tick((), done(a), n=100, worker="w")  # fewer than asked: the next round sends everything
        result = parts.tick()
    elif why == "closing":
        parts.drain()
        result = parts.tick()
    else:  # rounds that lease nothing, as a worker's poll sends what is pending, until the hold has elapsed
        rounds = []

        def sent() -> bool:
            rounds.append(parts.tick())
            return not parts.holding

        wait_for(sent, 10, step=0.05)
        result = rounds[-1]
    assert queued_in(parts, redis_client, b) == 1 and not parts.holding, why
    assert result.deferred_ack == [lease]


def test_a_reset_drops_the_links_and_acks_a_worker_held_for_the_crawl_that_ended(redis_client):
    parts, a, b, lease = holding_worker(redis_client, link_hold=60.0)
    parts.tick([op("old", b)], done(a), acks=[lease], n=2, worker="w")
    assert parts.holding
    redis_client.set(parts.keys.epoch, "after-a-reset")
    parts.tick([op("new", b)], done(a), n=2, worker="w")
    parts.drain()
    parts.tick()
    assert not parts.holding and queued_in(parts, redis_client, b) == 1, "only the link found after the reset"


def test_no_link_is_held_with_link_hold_zero(redis_client):
    parts, a, b, lease = holding_worker(redis_client, link_hold=0.0)
    result = parts.tick([op("child", b)], done(a), acks=[lease], n=2, worker="w")
    assert queued_in(parts, redis_client, b) == 1 and not parts.holding and result.deferred_ack == [lease]


def test_a_busy_round_asks_one_partition_per_16_requests_and_one_after_a_short_round_spreads_again(redis_client):
    parts = partitioned(redis_client, partitions=4, per_call=16)
    parts.tick([op(str(i), d) for i in range(40) for d in DOMAINS])

    def partitions_of(taken) -> set[int]:
        return {parts.keys.partition_of(lease_domain(t.lease_id)) for t in taken}

    first = parts.tick(n=8, worker="w").tick  # no round yet got what it asked: spread over 4
    assert len(first.taken) == 8 and len(partitions_of(first.taken)) == 4
    second = parts.tick(n=8, worker="w").tick  # busy: 8 requests are one partition's call
    assert len(second.taken) == 8 and len(partitions_of(second.taken)) == 1
    third = parts.tick(n=32, worker="w").tick
    assert len(third.taken) == 32 and len(partitions_of(third.taken)) == 2
    parts.tick(n=10_000, worker="w")  # short: the next round spreads again
    parts.tick([op(f"more{i}", d) for i in range(5) for d in DOMAINS])
    again = parts.tick(n=8, worker="w").tick
    assert len(partitions_of(again.taken)) == 4


def test_a_busy_round_asks_each_partition_for_what_it_had_ready_and_one_for_the_rest(redis_client):
    """FRONTIER_LEASES_PER_PARTITION=0 (the default): while rounds get all they ask, a round asks a partition that had
    more than it was asked (or was never asked) for all the round wants, and one that had less for what it had, the
    rest from the next: as few calls as the work takes. Short of work, the round spreads again."""
    parts = partitioned(redis_client, partitions=4, per_call=0)
    plan = parts._asks  # noqa: SLF001 - the plan alone, from given guesses
    parts._busy = True  # noqa: SLF001
    assert plan([2, 0, 1, 3], 32) == {2: 32}, "never asked: asked for all"
    parts._gave = {2: 5, 0: 10}  # noqa: SLF001
    assert plan([2, 0, 1, 3], 32) == {2: 5, 0: 10, 1: 17}
    parts._gave = {2: 5, 0: 10, 1: 4, 3: 3}  # noqa: SLF001
    assert plan([2, 0, 1, 3], 32) == {2: 5, 0: 10, 1: 4, 3: 13}, "at most 4 partitions: the last asked for the rest"
    assert plan([2, 0], 32) == {2: 5, 0: 27}
    parts._gave = {2: 40}  # noqa: SLF001
    assert plan([2, 0, 1, 3], 32) == {2: 32}
    parts._busy = False  # noqa: SLF001
    assert plan([2, 0, 1, 3], 32) == {2: 8, 0: 8, 1: 8, 3: 8}, "short of work: spread"
    assert plan([2, 0, 1, 3], 2) == {2: 1, 0: 1}


def test_a_partition_is_asked_for_what_it_had_ready_the_last_time(redis_client, monkeypatch):
    import crawlhub.frontier.partitions as module

    monkeypatch.setattr(module.random, "shuffle", lambda ready: ready.sort())  # ready partitions in their order
    parts = partitioned(redis_client, partitions=4, per_call=0)
    a, b = next((x, y) for x in DOMAINS for y in DOMAINS
                if parts.keys.partition_of(x) < parts.keys.partition_of(y))

    def taken_from(tick) -> dict[str, int]:
        counts: dict[str, int] = {}
        for t in tick.taken:
            counts[lease_domain(t.lease_id)] = counts.get(lease_domain(t.lease_id), 0) + 1
        return counts

    parts.tick([op(f"{d}{i}", d) for i in range(40) for d in (a, b)])
    assert taken_from(parts.tick(n=8, worker="w").tick) == {a: 4, b: 4}, "no round yet got all it asked: spread"
    assert taken_from(parts.tick(n=16, worker="w").tick) == {a: 16}, "busy, a had more: one call"
    assert taken_from(parts.tick(n=32, worker="w").tick) == {a: 20}, "a had 20: the round is short"
    assert taken_from(parts.tick(n=8, worker="w").tick) == {b: 8}, "short of work: spread (a is empty)"
    parts.tick([op(f"more{i}", a) for i in range(20)])
    assert taken_from(parts.tick(n=32, worker="w").tick) == {a: 20, b: 12}, "a asked for the 20 it had, b for the rest"
    assert taken_from(parts.tick(n=16, worker="w").tick) == {b: 16}, "b had more than its 12: asked for all"


@pytest.mark.parametrize("partitions", [1, 4])
def test_the_forced_requests_ids_a_call_keeps_go_with_a_reset(redis_client, partitions):
    """The ids of a worker's last forced requests (<queue>:~forced:<worker>: a call sent again after a lost reply
    queues them once) are crawl state like the queue: a reset deletes them with it, and a request forced after the
    reset, whatever its id, is queued."""
    parts = partitioned(redis_client, partitions=partitions)
    forced = [op(f"seed{i}", d, force=True)._replace(token=f"t{i}") for i, d in enumerate(DOMAINS[:3])]
    assert parts.tick(forced, worker="w").tick.added == 3
    assert parts.tick(forced, worker="w").tick.added == 0, "the same call again: queued once"
    assert redis_client.keys("*~forced*"), "kept in Redis"
    assert control.reset(redis_client, parts.keys) > 0
    assert redis_client.keys("*sp*") == [], redis_client.keys("*sp*")
    claim_layout(redis_client, parts.keys)
    assert parts.tick(forced, worker="w").tick.added == 3, "after the reset: queued again"
