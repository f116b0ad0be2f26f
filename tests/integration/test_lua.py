"""Each of the frontier's Lua scripts (crawlhub/frontier/lua/) on the real Redis, on its own."""


from __future__ import annotations

import json
import time

import pytest

from crawlhub.frontier import scripts
from crawlhub.frontier.politeness import set_limit
from crawlhub.frontier.records import Finish
from crawlhub.proxies import cool_key, strikes_key, tier_key
from tests.frontier_ops import BUDGET_EXHAUSTED
from tests.harness import wait_for
from tests.integration.test_frontier import frontier_for, request


@pytest.mark.parametrize("name", scripts.names())
def test_every_script_compiles_with_its_includes(redis_client, name):
    source = scripts.source(name)
    assert "--! include" not in source, "the includes are resolved"
    assert len(redis_client.script_load(source)) == 40  # Redis compiled it: a syntax error would raise


def test_renew_moves_live_deadlines_and_names_the_lost(redis_client):
    frontier = frontier_for(redis_client)
    set_limit(redis_client, "a.test", concurrency=4)  # a capped domain: its active set holds the leases' slots
    frontier.tick([request(i) for i in range(2)])
    (first, _), (second, _) = frontier.lease("w", 1, 2)[0]
    before = redis_client.zscore("sp:inflight", first)
    frontier.ack([second])
    assert frontier.renew([first, second], 60) == [second], "an acked lease is reported lost"
    assert redis_client.zscore("sp:inflight", first) >= before + 58
    active = redis_client.zscore("crawlhub:domain:a.test:active", f"sp/{first}")
    assert active is not None and active >= before + 58, "the domain's slot is renewed with it"
    # a domain without a cap has no slots: its lease's deadline moves, and no active entry appears
    frontier.tick([request(1, domain="u.test")])
    (free, _), = frontier.lease("w", 1, 1)[0]
    assert frontier.renew([free], 60) == [] and redis_client.zscore("sp:inflight", free) >= before + 58
    assert not redis_client.exists("crawlhub:domain:u.test:active")


def test_a_download_end_acked_in_the_same_call_is_not_sent_and_its_slot_frees_all_the_same(redis_client):
    """#30: a download's end with nothing to say but that its slot frees, acked in the same tick, is left out of
    the call (the ack frees the slot); a slow-down and a slowed lease's success still go, and say what they say."""
    frontier = frontier_for(redis_client)
    set_limit(redis_client, "a.test", concurrency=2)
    frontier.tick([request(i) for i in range(4)])
    (first, _), (second, _) = frontier.lease("w", 60, 2)[0]
    active = "crawlhub:domain:a.test:active"
    assert redis_client.zcard(active) == 2 and frontier.lease("w", 60, 1)[0] == [], "both slots are taken"
    slowed = "99s@a.test"  # a lease leased while its domain was slowed: its success brings the pace back
    ends = [Finish("a.test", first, "ok"), Finish("a.test", second, ""), Finish("a.test", slowed, "ok"),
            Finish("a.test", "7@a.test", "slow")]
    sent = json.loads(frontier.tick_args(finishes=ends, acks=[first, second, slowed, "7@a.test"])[0])["fin"]
    assert [(f["lease"], f["outcome"]) for f in sent] == [(slowed, "ok"), ("7@a.test", "slow")]
    assert len(json.loads(frontier.tick_args(finishes=ends[:2], acks=[second])[0])["fin"]) == 1, \
        "an end whose ack is not in the call is sent"
    result = frontier.tick(finishes=ends[:2], acks=[first, second], n=2, worker="w")
    assert result.acked == 2 and len(result.taken) == 2, "the acks freed both slots: the round leased two more"
    assert not {m.decode() for m in redis_client.zrange(active, 0, -1)} & {f"sp/{first}", f"sp/{second}"}
    assert redis_client.zcard(active) == 2, "the two new leases hold the slots"


def test_expired_returns_leases_past_their_deadline_with_owner_time_and_payload(redis_client):
    frontier = frontier_for(redis_client)
    frontier.tick([request(1), request(2)])
    (short, payload), = frontier.lease("dead-worker", 0.05, 1)[0]
    frontier.lease("live-worker", 60, 1)
    # (a deadline is rounded up to the second, #30: the short lease expires within a second)
    assert wait_for(frontier.expired, 3)
    ((lease_id, owner, taken, body, done),) = frontier.expired()
    assert (lease_id, owner, body) == (short, "dead-worker", payload) and abs(taken - time.time()) < 5
    assert (lease_id, owner, body, done) == (short, "dead-worker", payload, False) and abs(taken - time.time()) < 5
    assert done is False, "a lease no renewal marked is not done"


def test_a_renewal_marks_a_page_that_is_over_and_its_expiry_says_so(redis_client):
    """A lease renewed as done (its page over, waiting for the store) expires marked done, its holder, taken-at
    time and payload intact; marked twice, it is marked once; a lease renewed plainly is not marked."""
    frontier = frontier_for(redis_client)
    frontier.tick([request(1), request(2)])
    (over, payload), (busy, _) = frontier.lease("dead-worker", 60, 2)[0]
    for _ in range(2):
        assert frontier.renew([over, busy], 0.05, done={over}) == []
    assert wait_for(lambda: len(frontier.expired()) == 2, 3)
    expired = {e.lease_id: e for e in frontier.expired()}
    assert expired[over].done and not expired[busy].done
    assert (expired[over].worker, expired[over].payload) == ("dead-worker", payload)
    assert abs(expired[over].taken_at - expired[busy].taken_at) < 1, "the taken-at time reads as before"
    assert frontier.renew(["99@a.test"], 60, done={"99@a.test"}) == ["99@a.test"], "a lost id is named without its mark"


def test_pause_leases_nothing_until_resumed(redis_client):
    frontier = frontier_for(redis_client)
    frontier.tick([request(i) for i in range(3)])
    redis_client.set("sp:paused", 1)
    paused = frontier.tick(n=3, worker="w")
    assert paused.paused and paused.taken == []
    enqueued_while_paused = frontier.tick([request(9)])
    assert enqueued_while_paused.added == 1, "a paused frontier still takes links in"
    redis_client.delete("sp:paused")
    assert len(frontier.tick(n=10, worker="w").taken) == 4


def test_budget_stops_leasing_at_the_limit(redis_client):
    frontier = frontier_for(redis_client)
    frontier.tick([request(i) for i in range(10)])
    assert len(frontier.lease("w", 60, 10, budget=3)[0]) == 3, "no more than the budget in one call"
    assert frontier.lease("w", 60, 10, budget=3)[0] is BUDGET_EXHAUSTED
    redis_client.set("sp:budget", 5)  # `crawlhub budget sp 5` wins over the setting
    assert len(frontier.lease("w", 60, 10, budget=3)[0]) == 2
    assert redis_client.get("sp:budget_used") == b"5"


def test_escalate_moves_a_domain_to_the_next_pool_once(redis_client):
    escalate = redis_client.register_script(scripts.source("proxy_escalate"))
    key = tier_key("shop.test")
    assert escalate(keys=[key], args=["datacenter", "residential", "datacenter", 60]) == b"residential"
    # a second worker that saw the old tier: the domain moved already, it is not moved again
    assert escalate(keys=[key], args=["datacenter", "mobile", "datacenter", 60]) == b"residential"
    assert redis_client.get(key) == b"residential" and 0 < redis_client.ttl(key) <= 60


def test_proxy_fail_strikes_cools_down_escalates_and_marks_dead(redis_client):
    fail = redis_client.register_script(scripts.source("proxy_fail"))
    domain = "shop.test"
    args = {"health": "crawlhub:proxy:health", "cool": cool_key(domain), "strikes": strikes_key(domain),
            "domains": "crawlhub:proxy:domains", "tierbans": f"crawlhub:proxy:tierbans:{domain}:dc",
            "tier": tier_key(domain), "dead": "crawlhub:proxy:dead", "id": "dc/p1", "pool": "dc", "next": "res",
            "first": "dc", "reason": "HTTP 403", "domain": domain, "ban_after": 2, "base": 10, "most": 100,
            "escalate_after": 1, "tier_ttl": 60, "dead_after": 3}
    strikes, until, escalated, dead = fail(args=[json.dumps(args)])
    assert (strikes, until, escalated, dead) == (1, b"0", b"", b"0"), "one failure: a strike, no cool-down"
    strikes, until, escalated, dead = fail(args=[json.dumps(args)])
    assert strikes == 2 and float(until) > time.time() and escalated == b"res", "banned: cools down, the domain moves on"
    strikes, until, escalated, dead = fail(args=[json.dumps(args)])
    assert strikes == 0, "a download that began before the cool-down adds no strike"
    redis_client.hdel(cool_key(domain), "dc/p1")
    strikes, until, escalated, dead = fail(args=[json.dumps(args)])
    assert float(dead) > time.time(), "three failures in a row anywhere: dead"


def test_refresh_queues_a_due_page_once_per_due_time(redis_client):
    frontier = frontier_for(redis_client)
    page = {"fp": "ab12", "due": 1700000000.1234567, "payload": json.dumps({"url": "http://a.test/p"}),
            "priority": 0, "domain": "a.test"}
    assert frontier.refresh([page]) == ["ab12"]
    # a second refresher that read the same due time (the first died before marking the store) queues nothing
    assert frontier.refresh([page, dict(page, due=1700000000.1234566)]) == []
    assert redis_client.hget("sp:queued", "a.test") == b"1"
    assert frontier.refresh([dict(page, due=1700000600.0)]) == ["ab12"], "the next due time queues it again"
    taken, _ = frontier.lease("w", 60, 10)
    assert [json.loads(p)["url"] for _, p in taken] == ["http://a.test/p", "http://a.test/p"]
