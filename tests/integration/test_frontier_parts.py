"""The frontier's small units on their own: LeaseBook, RetryPolicy, the typed records, frontier_of."""


from __future__ import annotations

from crawlhub.frontier import keys as key_names
from crawlhub.frontier import scripts
from crawlhub.frontier.operations import FrontierOps


def test_the_lua_scripts_take_every_key_name_from_the_registry(redis_client):
    # #17: no script spells a key name (the per-domain prefix came in as ctx.domain, so a partition's
    # scripts touch only its own slot); the classic layout's prefix is still the registry's
    import re

    for name in [*scripts.names(), "_helpers", "_policy"]:
        text = scripts.source(name)
        assert not re.search(r"'crawlhub:|\"crawlhub:", text), f"{name}.lua spells a key name"
    assert "ctx.domain .. d" in scripts.source("_helpers")
    assert "ctx.domain .. host_of(d)" in scripts.source("_helpers")  # (a lane's queue: its domain's state)
    classic = FrontierOps(redis_client, key_names.spider_keys("sp"))
    assert classic.ctx["domain"] == key_names.DOMAIN and classic.ctx["known"] == key_names.DOMAINS
    # a frontier laid out before #30 (recorded ":tagged") keeps its tags
    tagged = FrontierOps(redis_client, key_names.spider_keys("sp").with_partitions(4, placed=False).part(3))
    assert {tagged.ctx[k][:6] for k in ("domain", "known", "prefix", "inflight", "dlq", "seen")} == {"{sp:3}"}
    assert "paused" not in tagged.ctx and "budget" not in tagged.ctx and "limits" not in tagged.ctx
    # placed (#30): every key of the partition under its own tag, {sp:3:<3 letters>}
    part = key_names.spider_keys("sp").with_partitions(4).part(3)
    tagged = FrontierOps(redis_client, part)
    assert part.tag.startswith("{sp:3:") and part.tag.endswith("}")
    assert part.tag.startswith("{sp:3:") and part.tag.endswith("}")  # (#30: placed tags; "{sp:3}" before)
    assert {tagged.ctx[k][:len(part.tag)] for k in ("domain", "known", "prefix", "inflight", "dlq", "seen")} == {part.tag}
    assert "paused" not in tagged.ctx and "budget" not in tagged.ctx and "limits" not in tagged.ctx
    # laid out by #30 before the keys of a round were grouped (recorded "placed"): the same placed tags
    part = key_names.spider_keys("sp").with_partitions(4, grouped=False).part(3)
    assert part.tag.startswith("{sp:3:") and part.tag.endswith("}")
    assert part.tag.startswith("{sp:3:") and part.tag.endswith("}")  # (#30: placed tags; "{sp:3}" before)
    assert part == key_names.spider_keys("sp").with_partitions(4).part(3)
