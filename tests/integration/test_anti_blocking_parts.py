"""Header profiles and proxy pools: the logic, without workers.

The Lua cool-down/escalation script runs against the tests' real Redis.
"""


from __future__ import annotations

import json
import time

from scrapy import Request, Spider
from scrapy.utils.test import get_crawler

from crawlhub import proxies as px
from crawlhub.downloadermiddlewares.proxy import ProxyMiddleware
from tests.helpers import project_settings


# -- the cluster's record, in the real Redis ------------------------------------------------
def test_failures_cool_down_escalate_and_kill_in_redis(redis_client):
    script = redis_client.register_script(px.FAIL)
    domain = "shop.example"

    def fail(proxy_id, pool="dc", nxt="res", **kw):
        args = {"id": proxy_id, "domain": domain, "pool": pool, "reason": "HTTP 403", "strikes": px.strikes_key(domain),
                "health": px.HEALTH, "domains": px.DOMAINS, "cool": px.cool_key(domain), "dead": px.DEAD,
                "tier": px.tier_key(domain), "tierbans": px.tier_bans_key(domain, pool), "first": "dc", "next": nxt,
                "ban_after": 2, "base": 60, "most": 600, "dead_after": 3, "escalate_after": 2, "tier_ttl": 100, **kw}
        strikes, until, escalated, dead = script(args=[json.dumps(args)])
        return int(strikes), float(until), escalated.decode(), float(dead)

    now = time.time()
    assert fail("dc/a")[:2] == (1, 0.0), "one failure: not yet"
    strikes, until, escalated, dead = fail("dc/a")
    assert strikes == 2 and 58 <= until - now <= 62 and escalated == "" and dead == 0
    assert fail("dc/a") == (0, 0.0, "", 0.0), "a download that began before the cool-down adds no strike"
    redis_client.hset(px.cool_key(domain), "dc/a", 0)  # the cool-down is over; it fails again: doubled
    strikes, until, escalated, dead = fail("dc/a")
    assert strikes == 3 and 118 <= until - now <= 122 and dead > now, "three failures in a row anywhere: dead"
    assert escalated == "res", "the second cool-down in the tier moves the domain on"
    assert redis_client.get(px.tier_key(domain)) == b"res" and 0 < redis_client.ttl(px.tier_key(domain)) <= 100
    fail("dc/b")
    assert fail("dc/b")[2] == "", "already moved on"
    health = px.proxy_health(redis_client)
    states = {p["id"]: p["state"] for p in health["proxies"]}
    assert states == {"dc/a": "dead", "dc/b": "cooling"} and health["tiers"] == {domain: "res"}


def test_the_first_proposal_is_the_clusters_choice(redis_client):
    from crawlhub.components import cluster_choice

    assert cluster_choice(redis_client, "t:choice", "d", "a", lambda c: True) == "a"
    assert cluster_choice(redis_client, "t:choice", "d", "b", lambda c: True) == "a", "the first worker decided"
    assert cluster_choice(redis_client, "t:choice", "d", "b", lambda c: c != "a") == "b", "unusable here: replaced"
    assert redis_client.hget("t:choice", "d") == b"b"
    assert cluster_choice(None, "t:choice", "d", "c", lambda c: True) == "c", "no Redis: this worker's own"


def test_a_sticky_choice_follows_the_clusters_record(redis_client):
    """A worker's sticky proxy for a domain mirrors the cluster's choice (crawlhub:proxy:sticky): read again with
    the domain's state (PROXY_STATE_REFRESH; 0 here: at every choice), so another worker's new choice or
    `crawlhub proxies reset` reaches it, and the workers never disagree for longer."""
    pools = {"dc": ["http://a:1", "http://b:1"]}
    crawler = get_crawler(Spider, settings_dict=project_settings(PROXY_POOLS=pools, PROXY_ROTATION="sticky",
                                                                 PROXY_STATE_REFRESH=0))
    mw = type("Shared", (ProxyMiddleware,), {"server": redis_client}).from_crawler(crawler)
    first = mw.choose(Request("https://example.com/")).id
    assert redis_client.hget(px.STICKY, "example.com").decode() == first
    assert {mw.choose(Request(f"https://example.com/{n}")).id for n in range(4)} == {first}
    other = "dc/b:1" if first == "dc/a:1" else "dc/a:1"
    redis_client.hset(px.STICKY, "example.com", other)  # another worker replaced it (it could not use it)
    assert mw.choose(Request("https://example.com/x")).id == other
    px.reset_state(redis_client)  # `crawlhub proxies reset`: the next choice is the cluster's again
    again = mw.choose(Request("https://example.com/y")).id
    assert redis_client.hget(px.STICKY, "example.com").decode() == again
