"""Each of the frontier's Lua scripts (crawlhub/frontier/lua/) on the real Redis, on its own."""


from __future__ import annotations

from crawlhub.frontier import scripts


def test_the_scripts_are_the_ones_on_disk():
    assert scripts.names() == ["expired", "finish", "hint", "move", "probe", "proxy_escalate", "proxy_fail", "refresh", "renew", "reserve",
                               "tick"]
    tick = scripts.source("tick")
    assert tick.index("local now") < tick.index("local function release") < tick.index("local function policy")
