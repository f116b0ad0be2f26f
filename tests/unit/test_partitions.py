"""The partitioned frontier (#17) on a plain Redis: key layout, routing, pause, budget, completion, acks
held across partitions, dead letters and reset over every partition."""


from __future__ import annotations

import math
import zlib

import pytest
from scrapy.settings import Settings

from crawlhub.frontier.keys import Keys, partition_of, slot_of_tag
from tests.helpers import project_settings


def layout(partitions: int, spider: str = "sp") -> Keys:
    return Keys.for_spider(Settings(project_settings()), spider, partitions=partitions)


def test_a_partition_is_one_hash_tag_and_a_domain_has_one_partition():
    keys = layout(8)
    assert keys.tagged and keys.partition_of("example.com") == zlib.crc32(b"example.com") % 8 == partition_of(
        "example.com", 8)
    # a frontier laid out before #30 (recorded "tagged"): the tags it always had
    unplaced = keys.with_partitions(8, placed=False)
    for p in range(8):
        part = unplaced.part(p)
        names = [*part.names(), part.domain_state("a.test"), part.domain_active("a.test")]
        assert all(n.startswith("{sp:%d}:" % p) for n in names), names  # noqa: UP031
        assert part.paused is None and part.budget is None and part.limits is None
    # placed (#30): one tag per partition all the same, {sp:<p>:<3 letters>}, in the middle of its share of the slots;
    # `keys` is a frontier laid out by #30 (recorded "placed"): the round's keys under their own names
    grouped = keys
    keys = grouped.with_partitions(8, grouped=False)
    assert keys.placed and keys.layout_record == "8:placed" and unplaced.layout_record == "8:tagged"
    assert "{" not in keys.paused + keys.budget + keys.seeds + keys.ready + keys.stats
    assert keys.epoch == "sp:epoch" and keys.budget_used == "sp:budget_used"
    # grouped (a new tagged frontier): the keys every round reads share partition 0's tag (one master's on a cluster)
    assert grouped.placed and grouped.grouped and grouped.layout_record == "8:grouped"
    tag0 = grouped.part(0).tag
    assert [grouped.epoch, grouped.paused, grouped.budget, grouped.budget_used, grouped.ready] == [
        f"{tag0}:epoch", f"{tag0}:paused", f"{tag0}:budget", f"{tag0}:budget_used", f"{tag0}:ready"]
    assert "{" not in grouped.seeds + grouped.stats + grouped.workers + grouped.layout + grouped.log  # (the rest keep theirs)
    assert [grouped.part(p) for p in range(8)] == [keys.part(p) for p in range(8)], "the same partition keys"
    for p in range(8):
        part = keys.part(p)
        names = [*part.names(), part.domain_state("a.test"), part.domain_active("a.test")]
        assert part.tag.startswith("{sp:%d:" % p) and len(part.tag) == len("{sp:%d:abc}" % p), part.tag  # noqa: UP031
        assert all(n.startswith(part.tag + ":") for n in names), names
        assert slot_of_tag(part.tag[1:-1]) == (2 * p + 1) * 16384 // 16
        assert part.paused is None and part.budget is None and part.limits is None
    classic = layout(1)
    assert not classic.tagged and classic.part(0).queue == "sp:requests" and classic.queue == "sp:requests"
    assert not classic.grouped and classic.layout_record == "1" and (classic.paused, classic.ready) == ("sp:paused", "sp:ready")
    with pytest.raises(AttributeError, match="8 partitions"):
        keys.inflight  # noqa: B018
    assert Keys.for_spider(Settings(project_settings()), "sp", partitions=1, cluster=True).part(0).tag == "{sp:0}"


def test_a_new_frontier_groups_the_keys_of_a_round_under_partition_0s_tag():
    keys = layout(8)
    assert keys.tagged and keys.partition_of("example.com") == zlib.crc32(b"example.com") % 8 == partition_of(
        "example.com", 8)
    # a frontier laid out before #30 (recorded "tagged"): the tags it always had
    unplaced = keys.with_partitions(8, placed=False)
    for p in range(8):
        part = unplaced.part(p)
        names = [*part.names(), part.domain_state("a.test"), part.domain_active("a.test")]
        assert all(n.startswith("{sp:%d}:" % p) for n in names), names  # noqa: UP031
        assert part.paused is None and part.budget is None and part.limits is None
    # placed (#30): one tag per partition all the same, {sp:<p>:<3 letters>}, in the middle of its share of the slots;
    # a frontier laid out by #30 (recorded "placed") keeps the round's keys under their own names
    placed = keys.with_partitions(8, grouped=False)
    assert placed.placed and placed.layout_record == "8:placed" and unplaced.layout_record == "8:tagged"
    assert "{" not in placed.paused + placed.budget + placed.seeds + placed.ready + placed.stats
    assert placed.epoch == "sp:epoch" and placed.budget_used == "sp:budget_used"
    # grouped (a new tagged frontier): the keys every round reads share partition 0's tag (one master's on a cluster)
    assert keys.placed and keys.grouped and keys.layout_record == "8:grouped"
    tag0 = keys.part(0).tag
    assert [keys.epoch, keys.paused, keys.budget, keys.budget_used, keys.ready] == [
        f"{tag0}:epoch", f"{tag0}:paused", f"{tag0}:budget", f"{tag0}:budget_used", f"{tag0}:ready"]
    assert "{" not in keys.seeds + keys.stats + keys.workers + keys.layout + keys.log  # (the rest keep their names)
    for p in range(8):
        part = keys.part(p)
        names = [*part.names(), part.domain_state("a.test"), part.domain_active("a.test")]
        assert part.tag.startswith("{sp:%d:" % p) and len(part.tag) == len("{sp:%d:abc}" % p), part.tag  # noqa: UP031
        assert all(n.startswith(part.tag + ":") for n in names), names
        assert slot_of_tag(part.tag[1:-1]) == (2 * p + 1) * 16384 // 16
        assert part.paused is None and part.budget is None and part.limits is None
    classic = layout(1)
    assert not classic.tagged and classic.part(0).queue == "sp:requests" and classic.queue == "sp:requests"
    assert not classic.grouped and classic.layout_record == "1" and (classic.paused, classic.ready) == ("sp:paused", "sp:ready")
    with pytest.raises(AttributeError, match="8 partitions"):
        keys.inflight  # noqa: B018
    assert Keys.for_spider(Settings(project_settings()), "sp", partitions=1, cluster=True).part(0).tag == "{sp:0}"


def test_a_frontier_laid_out_by_30_keeps_the_keys_of_a_round_under_their_own_names():
    """Recorded "placed" (laid out by #30, before the keys every round reads were grouped): the same partition
    keys as a new frontier, and epoch, pause, budget and hints under their own names."""
    grouped = layout(8)
    unplaced = grouped.with_partitions(8, placed=False)
    keys = grouped.with_partitions(8, grouped=False)
    assert keys.placed and keys.layout_record == "8:placed" and unplaced.layout_record == "8:tagged"
    assert "{" not in keys.paused + keys.budget + keys.seeds + keys.ready + keys.stats
    assert keys.epoch == "sp:epoch" and keys.budget_used == "sp:budget_used"
    assert [grouped.part(p) for p in range(8)] == [keys.part(p) for p in range(8)], "the same partition keys"


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


def create_ranges(masters: int) -> list[tuple[int, int]]:
    """The slot ranges ``redis-cli --cluster create`` gives ``masters`` masters (redis-cli.c:
    clusterManagerCommandCreate: lround over a float share, the last master to 16383)."""
    per, first, cursor, ranges = 16384 / masters, 0, 0.0, []
    for i in range(masters):
        last = 16383 if i == masters - 1 else max(first, int(math.floor(cursor + per - 1 + 0.5)))
        ranges.append((first, last))
        first, cursor = last + 1, cursor + per
    return ranges


@pytest.mark.parametrize("partitions", [2, 3, 8, 16, 24, 48, 64, 100, 256])
def test_placed_partitions_spread_evenly_over_masters_with_equal_slot_ranges(partitions):
    keys = layout(partitions, "a-spider.with_a-long.name")
    slots = [slot_of_tag(keys.tag(p)[1:-1]) for p in range(partitions)]
    assert len(set(slots)) == partitions
    for masters in range(1, 13):
        counts = [sum(a <= s <= b for s in slots) for a, b in create_ranges(masters)]
        assert sum(counts) == partitions and max(counts) - min(counts) <= 1, (masters, counts)
    # the tags of the same spider are the same in every process (a pure function of spider, p and the count)
    assert [keys.tag(p) for p in range(partitions)] == [layout(partitions, "a-spider.with_a-long.name").tag(p)
                                                          for p in range(partitions)]
