"""The partitioned frontier (#17) on a plain Redis: key layout, routing, pause, budget, completion, acks
held across partitions, dead letters and reset over every partition."""


from __future__ import annotations

import zlib

import pytest
from scrapy.settings import Settings

from crawlhub.frontier.keys import Keys, partition_of
from tests.helpers import project_settings


def layout(partitions: int, spider: str = "sp") -> Keys:
    return Keys.for_spider(Settings(project_settings()), spider, partitions=partitions)


def test_a_partition_is_one_hash_tag_and_a_domain_has_one_partition():
    keys = layout(8)
    assert keys.tagged and keys.partition_of("example.com") == zlib.crc32(b"example.com") % 8 == partition_of(
        "example.com", 8)
    for p in range(8):
        part = keys.part(p)
        names = [*part.names(), part.domain_state("a.test"), part.domain_active("a.test")]
        assert all(n.startswith("{sp:%d}:" % p) for n in names), names  # noqa: UP031
        assert part.paused is None and part.budget is None and part.limits is None
    assert "{" not in keys.paused + keys.budget + keys.seeds + keys.ready + keys.stats
    classic = layout(1)
    assert not classic.tagged and classic.part(0).queue == "sp:requests" and classic.queue == "sp:requests"
    with pytest.raises(AttributeError, match="8 partitions"):
        keys.inflight  # noqa: B018
    assert Keys.for_spider(Settings(project_settings()), "sp", partitions=1, cluster=True).part(0).tag == "{sp:0}"


def test_the_worker_local_filter_drops_only_what_it_sent():
    from crawlhub.frontier.dupefilter import RecentFingerprints

    recent = RecentFingerprints(4)
    keys = [recent.key(bytes([i]) * 20) for i in range(6)]
    for k in keys[:3]:
        assert k not in recent
        recent.add(k)
    assert all(k in recent for k in keys[:3]) and keys[3] not in recent
    for k in keys[3:6]:
        recent.add(k)  # the fourth starts a new generation: the first three are still remembered
    assert all(k in recent for k in keys), "two generations: nothing is forgotten before size more arrive"
    for i in range(6, 14):
        recent.add(recent.key(bytes([i]) * 20))
    assert keys[0] not in recent, "bounded: old fingerprints go"
