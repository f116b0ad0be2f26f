"""The lease gate (crawlhub.frontier.scheduler.LeaseGate): when a few free downloader slots wait for more."""

from __future__ import annotations

import pytest

from crawlhub.frontier.scheduler import LeaseGate


def busy_gate(latency: float = 1.0) -> LeaseGate:
    gate = LeaseGate(least=16, linger=0.05)
    gate.observe(latency)
    gate.leased(32, 32)  # the last round gave all it was asked for: the downloader is the limit
    return gate


def test_a_few_free_slots_wait_while_the_downloader_is_the_limit_and_no_longer_than_the_linger():
    gate = busy_gate()
    assert gate.wait(room=3, active=29, now=100.0) == pytest.approx(0.05)
    assert gate.wait(room=5, active=27, now=100.03) == pytest.approx(0.02), "the wait counts from the first hold"
    assert gate.wait(room=6, active=26, now=100.05) == 0.0, "the linger is over: lease what is free"
    assert gate.wait(room=2, active=30, now=100.06) == pytest.approx(0.05), "a new hold starts over"


def test_slots_are_leased_at_once_when_enough_are_free_the_downloader_is_idle_or_the_frontier_gave_less():
    gate = busy_gate()
    assert gate.wait(room=16, active=16, now=1.0) == 0.0
    assert gate.wait(room=3, active=0, now=1.0) == 0.0, "nothing downloading: nothing to wait for"
    gate.leased(8, 5)  # the frontier had less than asked (politeness, the crawl's tail): never late for a domain
    assert gate.wait(room=3, active=29, now=1.0) == 0.0


def test_the_wait_is_at_most_a_tenth_of_the_downloads_latency_and_none_before_one_is_seen():
    fast = busy_gate(latency=0.1)
    assert fast.wait(room=3, active=29, now=5.0) == pytest.approx(0.01), "slots idle for at most ~5% of their time"
    unseen = LeaseGate(least=16, linger=0.05)
    unseen.leased(32, 32)
    assert unseen.wait(room=3, active=29, now=5.0) == 0.0
    off = LeaseGate(least=1, linger=0.05)
    off.observe(1.0)
    off.leased(32, 32)
    assert off.wait(room=1, active=31, now=5.0) == 0.0, "FRONTIER_LEASE_MIN=1: every free slot at once"
