"""Lanes on a real Redis (crawlhub.roles): work that needs a rung is leased only by workers that take it, never
waits behind the other kind, and keeps its domain's politeness."""

from __future__ import annotations

import json
import zlib

from scrapy.settings import Settings

from crawlhub.frontier.dupefilter import make_filter
from crawlhub.frontier.partitions import EMPTY
from crawlhub.frontier.records import EnqueueOp, lease_domain
from crawlhub.roles import queue_of
from tests.frontier_ops import Frontier, Keys
from tests.helpers import project_settings
from tests.integration.test_partitions import partitioned


def plain_keys() -> Keys:
    return Keys.for_spider(Settings(project_settings()), "sp")


def worker(redis_client, lanes, concurrency: int = 0) -> Frontier:
    s = Settings(project_settings())
    keys = Keys.for_spider(s, "sp")
    return Frontier(redis_client, keys, "sp", {"rate": 0, "concurrency": concurrency},
                    dupefilter=make_filter(redis_client, s, keys.dupefilter), lanes=lanes)


def page(n: int, domain: str = "a.test", lane: str = "") -> EnqueueOp:
    url = f"http://{domain}/{lane or 'plain'}/{n}"
    return EnqueueOp(zlib.crc32(url.encode()).to_bytes(4, "big").hex() * 5, json.dumps({"url": url}).encode(), 0,
                     False, "", queue_of(domain, lane))


def urls(taken) -> list[str]:
    return [json.loads(payload)["url"] for _, payload in taken]


def test_each_worker_leases_only_its_lanes_and_a_lane_keeps_its_domains_slots(redis_client):
    plain, browser = worker(redis_client, [""], concurrency=1), worker(redis_client, ["browser"], concurrency=1)
    both = worker(redis_client, ["", "browser"], concurrency=1)
    plain.tick([page(i) for i in range(3)] + [page(i, lane="browser") for i in range(3)])

    (first,) = plain.lease("p", 60, 10)[0]  # the domain's one slot
    assert "/plain/" in json.loads(first[1])["url"]
    assert browser.lease("b", 60, 10)[0] == [], "the lane waits for its domain's slot, held by the plain lease"
    plain.ack([first[0]])
    (lane_lease,) = browser.lease("b", 60, 10)[0]
    assert urls([lane_lease]) == ["http://a.test/browser/0"] and lease_domain(lane_lease[0]) == "a.test#browser"
    assert plain.lease("p", 60, 10)[0] == [], "one slot for the domain, whichever lane holds it"

    # a lease given back goes back to its own lane, first in line
    assert browser.requeue(lane_lease[0], lane_lease[1], 0)
    assert redis_client.hget("sp:queued", "a.test#browser") == b"3", "counted per lane: status reads it"

    # a plain worker never takes browser work, however long it asks; a worker of both lanes takes both
    got: list = []
    for _ in range(10):
        taken = plain.tick(n=10, worker="p").taken
        plain.ack([lid for lid, _ in taken])
        got += taken
    assert sorted(urls(got)) == [f"http://a.test/plain/{i}" for i in (1, 2)]
    rest: list = []
    for _ in range(10):
        taken = both.tick(n=10, worker="x").taken
        both.ack([lid for lid, _ in taken])
        rest += taken
    assert urls(rest) == [f"http://a.test/browser/{i}" for i in range(3)], "the lease given back first"


def test_a_reset_removes_the_lanes(redis_client):
    from crawlhub.frontier import control

    plain = worker(redis_client, [""])
    plain.tick([page(0, lane="browser"), page(1, lane="impersonate")])
    assert redis_client.exists("sp:domains:browser", "sp:domains:impersonate") == 2
    control.reset(redis_client, plain_keys())
    assert redis_client.keys("sp:*") == [], redis_client.keys("sp:*")


def test_a_plain_worker_is_not_pending_on_browser_work_and_never_waits_behind_it(redis_client):
    plain, browser = worker(redis_client, [""]), worker(redis_client, ["browser"])
    # many domains of browser work ahead of one plain domain in the schedule (the plain domain comes last)
    plain.tick([page(0, f"js{i}.test", "browser") for i in range(40)])
    assert not plain.pending() and browser.pending(), "pending is per lane"
    idle = plain.tick(n=4, worker="p")
    assert idle.taken == [] and idle.wait is None, "nothing for this worker: no wake-up for work it cannot take"
    assert idle.any_wait == 0.0, "yet the partition has work ready (its hint must not say empty)"
    plain.tick([page(0, "plain.test")])
    assert urls(plain.tick(n=1, worker="p").taken) == ["http://plain.test/plain/0"], \
        "the plain domain is leased at once, not after the 40 browser domains scanned first"
    assert len(browser.tick(n=100, worker="b").taken) == 40


def test_a_partition_with_only_another_lanes_work_is_not_hinted_empty(redis_client):
    plain, browser = partitioned(redis_client, lanes=[""]), partitioned(redis_client, lanes=["browser"])
    plain.tick([page(0, "js.test", "browser")])
    p = plain.keys.partition_of("js.test#browser")
    assert p == plain.keys.partition_of("js.test"), "a lane lives in its domain's partition"
    for _ in range(3):
        assert plain.tick(n=4, worker="p").tick.taken == []
    assert redis_client.zscore(plain.keys.ready, str(p)) < EMPTY, "the plain worker's rounds left the work hinted"
    assert urls(browser.tick(n=4, worker="b").tick.taken) == ["http://js.test/browser/0"]


def test_a_worker_asks_last_the_partitions_whose_ready_work_is_all_in_lanes_it_does_not_take(redis_client):
    """The hint is per partition (any lane's work): a plain worker that found only browser work in a partition asks
    it after the others for FRONTIER_PARTITION_RECHECK, so that its rounds go to partitions with its own work."""
    plain = partitioned(redis_client, partitions=8, lanes=[""])
    plain.recheck = 30.0
    by_part: dict[int, str] = {}
    n = 0
    while len(by_part) < 8:
        by_part.setdefault(plain.keys.partition_of(f"js{n}.test"), f"js{n}.test")
        n += 1
    plain.tick([page(0, domain, "browser") for domain in by_part.values()])
    assert plain.tick(n=4, worker="p").tick.taken == []
    assert len(plain.not_mine) == 4, "the four partitions it asked held browser work only"
    ready = plain._prepare(4, 0)[3]
    assert len(ready) == 8 and set(ready[4:]) == set(plain.not_mine), "those are asked last"
    plain.tick(n=4, worker="p")
    assert len(plain.not_mine) == 8
    plain.tick([page(0, by_part[ready[0]])])  # its own link into one of them: asked first again, leased at once
    assert ready[0] not in plain.not_mine
    taken = plain.tick(n=4, worker="p").tick.taken
    assert [t.lease_id.split("@")[1] for t in taken] == [by_part[ready[0]]]
