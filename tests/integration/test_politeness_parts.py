"""The politeness scripts on a real Redis, and the parsing around them."""


from __future__ import annotations

import json
import time
from collections import Counter

import pytest
from scrapy.settings import Settings

from crawlhub.frontier.politeness import (
    Politeness,
    clear_limit,
    domain_state,
    set_limit,
)
from tests.frontier_ops import Frontier, Keys, lease_domain
from tests.harness import wait_for
from tests.helpers import project_settings


def politeness(redis_client, **overrides) -> Politeness:
    return Politeness.from_settings(redis_client, Settings(project_settings(**overrides)))


@pytest.fixture
def make(redis_client):
    """make(**settings) -> (frontier, politeness) for spider "sp"."""

    def build(**overrides):
        overrides.setdefault("DOMAIN_RATE", "0")
        overrides.setdefault("DOMAIN_CONCURRENCY", 0)
        pol = politeness(redis_client, **overrides)
        return Frontier(redis_client, Keys.for_spider(Settings(), "sp"), "sp", pol.config()), pol

    return build


def fill(frontier, domain, count, priority=0):
    for i in range(count):
        url = f"http://{domain}/{i}"
        frontier.enqueue(url, json.dumps({"url": url, "priority": priority}).encode(), priority, domain=domain)


def domains(taken):
    return [lease_domain(lease_id) for lease_id, _ in taken]


def test_rate_paces_one_domain_without_blocking_another(make):
    frontier, _ = make(DOMAIN_LIMITS={"slow.test": "2/s"})
    fill(frontier, "slow.test", 5)
    fill(frontier, "fast.test", 5)
    taken, wait = frontier.lease("w", 60, 20)
    assert sorted(domains(taken)) == ["fast.test"] * 5 + ["slow.test"]
    assert 0.4 < wait <= 0.5, "the worker is told when slow.test is ready again"
    taken, wait = frontier.lease("w", 60, 20)
    assert taken == [] and 0.3 < wait <= 0.5
    time.sleep(wait)
    taken, _ = frontier.lease("w", 60, 20)
    assert domains(taken) == ["slow.test"]


def test_priority_across_ready_domains(make):
    frontier, _ = make()
    fill(frontier, "low.test", 3, priority=0)
    fill(frontier, "high.test", 1, priority=10)
    (first, *_), _ = frontier.lease("w", 60, 1)
    assert lease_domain(first[0]) == "high.test"


def test_a_lease_reads_more_heads_only_while_it_still_wants_requests(make, redis_client):
    """A lease reads its ready domains' heads FRONTIER_DOMAINS_PER_LEASE (16) at a time: a round the first 16
    domains serve reads no more heads than a lease of one; one they cannot serve reads on until it has its n."""
    frontier, _ = make()  # no pace, no cap: a domain gives as many as asked

    def zranges(n):
        redis_client.config_resetstat()
        taken, _ = frontier.lease("w", 60, n)
        return len(taken), int(redis_client.info("commandstats").get("cmdstat_zrange", {}).get("calls", 0))

    for i in range(40):
        fill(frontier, f"d{i:02}.test", 4)
    one = zranges(1)
    assert one[0] == 1
    assert zranges(32) == (32, one[1]), "the first 16 domains serve 32: no more heads read than for one"
    for i in range(40):
        fill(frontier, f"a{i:02}.test", 1)  # 40 domains of one request each, first in the schedule (score 0, by name)
    got, read = zranges(40)
    assert got == 40 and read >= one[1] + 24, "one request a domain: the heads of 40 domains read, 16 at a time"


def test_concurrency_cap_and_release(make, redis_client):
    frontier, pol = make(DOMAIN_CONCURRENCY=2)
    fill(frontier, "c.test", 6)
    taken, _ = frontier.lease("w", 60, 10)
    assert len(taken) == 2
    assert frontier.lease("w", 60, 10)[0] == []
    frontier.finish("c.test", taken[0][0], pol.outcome(200), 0)  # the response is in
    again, _ = frontier.lease("w", 60, 10)
    assert len(again) == 1, "a finished download frees its slot at once"
    frontier.ack([taken[1][0]])  # ending a lease frees its slot too
    assert len(frontier.lease("w", 60, 10)[0]) == 1
    assert redis_client.zcard("crawlhub:domain:c.test:active") == 2


def test_a_domain_without_a_cap_keeps_no_active_set_and_a_cap_set_later_counts_what_follows(make, redis_client):
    frontier, pol = make()  # DOMAIN_CONCURRENCY=0: no cap
    fill(frontier, "u.test", 10)
    taken, _ = frontier.lease("w", 60, 3)
    assert len(taken) == 3 and not redis_client.exists("crawlhub:domain:u.test:active"), "nothing to count"
    assert domain_state(redis_client, "u.test")["active"] == 0
    set_limit(redis_client, "u.test", concurrency=2)  # the cap counts the leases taken after it
    again, _ = frontier.lease("w", 60, 10)
    assert len(again) == 2 and redis_client.zcard("crawlhub:domain:u.test:active") == 2
    assert frontier.lease("w", 60, 10)[0] == [], "at its new cap"
    frontier.finish("u.test", taken[0][0], pol.outcome(200), 0)  # an uncounted download ends: no slot freed
    assert frontier.lease("w", 60, 10)[0] == []
    frontier.ack([again[0][0]])
    assert len(frontier.lease("w", 60, 10)[0]) == 1, "a counted one's end frees its slot"


def test_a_round_leases_ahead_only_from_domains_with_nothing_to_be_polite_about(make, redis_client):
    frontier, pol = make(DOMAIN_LIMITS={"paced.test": "2/s", "capped.test": {"concurrency": 3}})
    fill(frontier, "slowed.test", 1)
    (slow, _), = frontier.lease("w", 60, 1)[0]
    frontier.finish("slowed.test", slow, pol.outcome(503), 0)  # slowed down: paced from now on
    for domain in ("capped.test", "free.test", "paced.test", "slowed.test"):
        fill(frontier, domain, 30 if domain == "free.test" else 10)
    result = frontier.tick(n=4, worker="w", ttl=60, ahead=8)
    got = Counter(domains(result.taken))
    assert sum(got.values()) == 12 and got["free.test"] >= 8, got
    assert sum(v for d, v in got.items() if d != "free.test") <= 4, f"the limited domains share n, never more: {got}"
    assert got["capped.test"] <= 3 and got["paced.test"] <= 1 and got["slowed.test"] <= 1, got
    # a limited domain the round did not reach keeps its place: the next round takes it at once
    again = Counter(domains(frontier.tick(n=4, worker="w", ttl=60).taken))
    assert got["paced.test"] + again["paced.test"] == 1, (got, again)
    # without ahead, n: and under a budget nothing is leased ahead (its count is exact)
    assert len(frontier.tick(n=1, worker="w", ttl=60).taken) == 1
    redis_client.set(frontier.keys.budget, 1000)
    assert len(frontier.tick(n=2, worker="w", ttl=60, ahead=8).taken) == 2


def test_run_time_limit_wins_over_settings(make, redis_client):
    frontier, _ = make(DOMAIN_LIMITS={"r.test": {"rate": "none", "concurrency": 5}})
    fill(frontier, "r.test", 10)
    set_limit(redis_client, "r.test", concurrency=1)
    assert len(frontier.lease("w", 60, 10)[0]) == 1
    assert clear_limit(redis_client, "r.test")
    time.sleep(1.05)  # a domain at its cap is looked at again within a second (or when a slot frees)
    assert len(frontier.lease("w", 60, 10)[0]) == 4, "the settings' concurrency of 5 applies again"


def test_429_blocks_the_domain_for_retry_after_and_recovers(make, redis_client):
    frontier, pol = make(DOMAIN_LIMITS={"b.test": "10/s"})
    fill(frontier, "b.test", 5)
    (lease, _), = frontier.lease("w", 60, 1)[0]
    assert frontier.finish("b.test", lease, pol.outcome(429), 3) == 2.0
    taken, wait = frontier.lease("w", 60, 5)
    assert taken == [] and 2.8 < wait <= 3.0
    state = domain_state(redis_client, "b.test")
    assert state["factor"] == 2 and 2.8 < state["blocked_for"] <= 3 and state["slowdowns"] == 1
    # successes bring the factor back to 1, gradually
    factors = [frontier.finish("b.test", "", pol.outcome(200), 0) for _ in range(4)]
    assert factors[0] == pytest.approx(1.6) and factors[-1] == 1.0
    assert "factor" not in {k.decode() for k in redis_client.hkeys("crawlhub:domain:b.test")}


def test_slowdown_applies_to_an_unlimited_domain(make):
    frontier, pol = make(DOMAIN_BACKOFF_BASE=0.5)
    fill(frontier, "u.test", 5)
    (lease, _), = frontier.lease("w", 60, 1)[0]
    frontier.finish("u.test", lease, pol.outcome(503), 0)
    taken, wait = frontier.lease("w", 60, 5)
    assert len(taken) == 1, "no Retry-After: not blocked, but paced at base x factor"
    assert frontier.lease("w", 60, 5)[0] == [] and 0.9 < frontier.lease("w", 60, 5)[1] <= 1.0


def test_crawl_delay_is_a_floor_on_the_interval(make):
    frontier, pol = make(DOMAIN_LIMITS={"d.test": "10/s"})
    pol.set_crawl_delay("d.test", 2.0)
    fill(frontier, "d.test", 3)
    taken, wait = frontier.lease("w", 60, 3)
    assert len(taken) == 1 and 1.9 < wait <= 2.0


@pytest.mark.alone  # its waits are asserted to 0.02 s: measured from the calls' own times, which a busy machine moves
def test_reserve_takes_slots_for_unleased_requests(make):
    _, pol = make(DOMAIN_LIMITS={"r.test": "4/s"})
    waits = [pol.reserve("r.test") for _ in range(3)]
    assert waits[0] == 0 and waits[1] == pytest.approx(0.25, abs=0.02) and waits[2] == pytest.approx(0.5, abs=0.02)


def test_retries_and_returns_go_back_to_their_domain(make, redis_client):
    frontier, _ = make()
    fill(frontier, "x.test:8080", 2)
    (a, pa), (b, pb) = frontier.lease("w", 60, 2)[0]
    assert frontier.delay(a, pa, 0.05) and frontier.requeue(b, pb, 0)
    assert redis_client.zrange("sp:delayed", 0, -1)[0].startswith(b"x.test:8080\t")
    time.sleep(0.1)
    assert sorted(domains(frontier.lease("w", 60, 5)[0])) == ["x.test:8080"] * 2
    assert frontier.counts()["queued"] == 0 and not frontier.pending()


def test_a_domains_state_expiry_is_renewed_once_a_day_not_with_every_window(make, redis_client):
    frontier, _ = make(DOMAIN_CONCURRENCY=2)
    fill(frontier, "d.test", 4)
    key = "crawlhub:domain:d.test"
    taken, _ = frontier.lease("w", 60, 1)
    day = str(int(time.time() // 86400))
    assert redis_client.hget(key, "xd") == day.encode() and redis_client.ttl(key) > 86400 * 6
    # a new rate window the same day: the expiry is not written again (two commands a domain a day, not a window)
    redis_client.expire(key, 1000)
    redis_client.hset(key, "win", 1)
    frontier.ack([taken[0][0]])
    taken, _ = frontier.lease("w", 60, 1)
    assert len(taken) == 1 and 0 < redis_client.ttl(key) <= 1000
    # the next day's first window renews it, and drops the slots of leases whose deadline passed
    redis_client.hset(key, mapping={"win": 1, "xd": str(int(day) - 1)})
    redis_client.zadd(f"{key}:active", {"sp/gone@d.test": 1})
    frontier.ack([taken[0][0]])
    taken, _ = frontier.lease("w", 60, 1)
    assert len(taken) == 1 and redis_client.ttl(key) > 86400 * 6 and redis_client.hget(key, "xd") == day.encode()
    assert redis_client.zscore(f"{key}:active", "sp/gone@d.test") is None


def test_a_new_domains_expired_slots_do_not_count_and_are_swept_on_the_next_days_visit(make, redis_client):
    """A domain with no state (none taken for a week, or ever) may still have an active set: slots of leases a
    killed worker held. They are past their deadline, so they do not count against the cap; the daily sweep
    drops them (its first visit of a day with state)."""
    frontier, _ = make(DOMAIN_CONCURRENCY=2)
    fill(frontier, "f.test", 4)
    key = "crawlhub:domain:f.test"
    redis_client.zadd(f"{key}:active", {"sp/1@f.test": 1, "sp/2@f.test": 2})
    taken, _ = frontier.lease("w", 60, 2)
    assert len(taken) == 2, "slots past their deadline do not count against the cap"
    day = int(time.time() // 86400)
    redis_client.hset(key, mapping={"win": 1, "xd": str(day - 1)})
    frontier.ack([lease for lease, _ in taken])
    taken, _ = frontier.lease("w", 60, 1)
    assert len(taken) == 1 and redis_client.hget(key, "xd") == str(day).encode()
    assert redis_client.zscore(f"{key}:active", "sp/1@f.test") is None
    assert redis_client.zscore(f"{key}:active", "sp/2@f.test") is None


def test_a_domain_emptied_by_its_lease_leaves_no_count_behind_even_one_that_drifted(make, redis_client):
    frontier, _ = make()
    fill(frontier, "e.test", 2)
    redis_client.hincrby("sp:queued", "e.test", 5)  # a count gone wrong (a reset racing a push)
    taken, _ = frontier.lease("w", 60, 10)
    assert len(taken) == 2 and redis_client.hget("sp:queued", "e.test") is None
    fill(frontier, "f.test", 3)
    taken, _ = frontier.lease("w", 60, 1)
    assert len(taken) == 1 and redis_client.hget("sp:queued", "f.test") == b"2"


def test_a_count_that_drifted_never_drops_a_queue_nor_keeps_an_empty_one_scheduled(make, redis_client):
    """A lease that takes all it asks from a domain's only priority reads its count, not the list: a count that
    drifted low is checked against the list (nothing is dropped); one that drifted high is set right the next round."""
    frontier, _ = make()
    fill(frontier, "low.test", 3)
    redis_client.hset("sp:queued", "low.test", 1)  # says one is queued where three are
    taken, _ = frontier.lease("w", 60, 1)
    assert domains(taken) == ["low.test"]
    assert redis_client.zscore("sp:domains", "low.test") is not None, "two are left: the domain stays scheduled"
    rest = [frontier.lease("w", 60, 5)[0] for _ in range(2)]
    assert sum(map(len, rest)) == 2, "nothing was dropped"
    fill(frontier, "high.test", 1)
    redis_client.hincrby("sp:queued", "high.test", 4)  # says five where one is
    assert domains(frontier.lease("w", 60, 1)[0]) == ["high.test"]
    assert frontier.lease("w", 60, 1)[0] == []
    assert redis_client.zscore("sp:domains", "high.test") is None and redis_client.hget("sp:queued", "high.test") is None


def test_an_ack_sent_with_its_downloads_end_frees_the_slot_once(make, redis_client):
    """A download's end frees its slot; its page's ack in the same call does not ask again (one ZREM of the
    domain's active set, not two)."""
    frontier, pol = make(DOMAIN_CONCURRENCY=4)
    fill(frontier, "s.test", 2)
    taken, _ = frontier.lease("w", 60, 2)
    redis_client.config_resetstat()
    result = frontier.tick(finishes=[("s.test", lid, pol.outcome(200), 0) for lid, _ in taken],
                           acks=[lid for lid, _ in taken])
    assert result.acked == 2 and redis_client.zcard("crawlhub:domain:s.test:active") == 0
    zrem = int(redis_client.info("commandstats")["cmdstat_zrem"]["calls"])
    assert zrem == 2, "the in-flight set once, the domain's active set once"
    frontier.enqueue("http://s.test/2", b'{"url": "http://s.test/2"}', 0, domain="s.test")
    (lid, _), = frontier.lease("w", 60, 1)[0]
    assert frontier.ack([lid]) == 1 and redis_client.zcard("crawlhub:domain:s.test:active") == 0, \
        "an ack alone still frees the slot"


def test_a_success_brings_a_slowed_domain_back_only_for_what_was_leased_while_slowed(make, redis_client):
    """A lease made while its domain was slowed says so in its id; its success (in a tick) brings the domain back,
    and a success of one leased at the domain's own pace reads no state at all (no HGET of the factor)."""
    frontier, pol = make(DOMAIN_BACKOFF_BASE=0.01)
    fill(frontier, "f.test", 4)
    (before, _), (slowed_by, _) = frontier.lease("w", 60, 2)[0]
    assert "s@" not in before, "leased at its own pace"
    redis_client.config_resetstat()
    frontier.tick(finishes=[("f.test", before, pol.outcome(200), 0)])
    assert "cmdstat_hget" not in redis_client.info("commandstats"), "nothing to bring back: the state is not read"
    assert frontier.finish("f.test", slowed_by, pol.outcome(503), 0) == 2.0
    frontier.tick(finishes=[("f.test", before, pol.outcome(200), 0)])
    assert domain_state(redis_client, "f.test")["factor"] == 2, "leased before the slow-down: it says nothing of it"
    taken = wait_for_lease(frontier)
    assert taken.split("@")[0].endswith("s"), "leased while slowed: its id says so"
    frontier.tick(finishes=[("f.test", taken, pol.outcome(200), 0)])
    assert domain_state(redis_client, "f.test")["factor"] == pytest.approx(1.6), "its success brings the domain back"
    assert frontier.finish("f.test", "", pol.outcome(200), 0) == pytest.approx(1.28), "a finish with no lease reads it"


def wait_for_lease(frontier) -> str:
    """The next lease of the frontier's one domain, once its pace allows one."""
    found: list[str] = []

    def leased() -> bool:
        found.extend(lease_id for lease_id, _ in frontier.lease("w", 60, 1)[0])
        return bool(found)

    assert wait_for(leased, timeout=10), "a slowed domain gives a request again"
    return found[0]


def test_a_schedule_holds_whole_microseconds_and_reads_an_older_workers_seconds_as_due(make, redis_client):
    """A domain's time in the schedule is an integer of microseconds (a partition's schedule is a listpack, which
    Redis scans member by member: an integral score is compared without parsing its text), the time its pace lets
    it go again; a time an older worker wrote in seconds reads as long past: the domain is asked, and rescheduled."""
    frontier, _ = make(DOMAIN_LIMITS={"slow.test": "2/s"})
    fill(frontier, "slow.test", 3)
    before = redis_client.time()
    taken, wait = frontier.lease("w", 60, 5)
    assert domains(taken) == ["slow.test"]
    score = redis_client.zscore("sp:domains", "slow.test")
    assert score == int(score), "whole microseconds"
    at = before[0] + before[1] / 1e6
    assert at + 0.5 <= score / 1e6 <= at + 0.5 + 1.0, "when its pace (2/s) lets it go again, in microseconds"
    assert 0.4 < wait <= 0.5
    # an older worker's score: the time in seconds, half a second ahead
    now = redis_client.time()
    redis_client.zadd("sp:domains", {"fast.test": now[0] + 0.5})
    fill(frontier, "fast.test", 2)
    taken, _ = frontier.lease("w", 60, 5)
    assert sorted(domains(taken)) == ["fast.test", "fast.test"], "read as due: leased at once"
