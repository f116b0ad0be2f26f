"""The ladder's shared state: each domain's rung (plain, impersonate, browser) for the whole cluster.

``crawlhub:{ladder}`` is a hash: domain -> JSON ``{rung, since, probe_at, backoff, why, from}``; a domain
on the plain rung has no entry. ``crawlhub:{ladder}:blocks`` counts blocked answers towards a climb
(field ``domain<TAB>rung``). Both are written by :data:`SCRIPT` only (one hash tag: one slot on a Redis
Cluster). The middleware that moves domains is
:class:`crawlhub.downloadermiddlewares.ladder.LadderMiddleware`; ``crawlhub status`` reads them here.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

import redis

from crawlhub.frontier.records import text

logger = logging.getLogger(__name__)

LADDER = "crawlhub:{ladder}"
BLOCKS = "crawlhub:{ladder}:blocks"

SCRIPT = """-- A domain's rung on the ladder (plain -> impersonate -> browser), for the whole cluster (crawlhub.ladder).
-- KEYS[1]: the ladder hash (domain -> JSON {rung, since, probe_at, backoff, why}; absent = plain);
-- KEYS[2]: the blocks counted per domain and rung (field domain TAB rung).
-- ARGV: op, domain, rung, now, then per op:
--   'block'  a blocked answer on `rung`: climb_after, next rung, probe_after, why.
--            Counts it; the climb_after-th block on the domain's own rung moves it to the next rung.
--   'probe'  claims the probe of the rung below for one request (none other until the back-off passes).
--   'probed' the probe on `rung` (below the domain's) answered: ARGV[5] '1' = not blocked, probe_after,
--            probe_max. Not blocked: the domain comes down to `rung`; blocked: the back-off doubles.
-- Returns the domain's state as JSON ('' = plain), then 1 if this call moved it (or claimed the probe), else 0.
local op, d, rung, now = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4])
local raw = redis.call('HGET', KEYS[1], d)
local state = raw and cjson.decode(raw) or nil
local current = state and state.rung or 'plain'
local function put(s)
  if s then redis.call('HSET', KEYS[1], d, cjson.encode(s)) else redis.call('HDEL', KEYS[1], d) end
  return s and cjson.encode(s) or ''
end
if op == 'block' then
  if current ~= rung then return {raw or '', 0} end  -- the domain is on another rung already
  local field = d .. '\\t' .. rung
  local n = redis.call('HINCRBY', KEYS[2], field, 1)
  if n < tonumber(ARGV[5]) then return {raw or '', 0} end
  redis.call('HDEL', KEYS[2], field)
  local after = tonumber(ARGV[7])
  return {put({rung = ARGV[6], since = now, probe_at = now + after, backoff = after, why = ARGV[8], from = rung}), 1}
end
if op == 'probe' then
  if not state or tonumber(state.probe_at) > now then return {raw or '', 0} end
  state.probe_at = now + tonumber(state.backoff)  -- (the probe's answer sets it again)
  return {put(state), 1}
end
if op == 'probed' then
  if not state then return {'', 0} end
  local after, most = tonumber(ARGV[6]), tonumber(ARGV[7])
  if ARGV[5] == '1' then
    redis.call('HDEL', KEYS[2], d .. '\\t' .. rung)
    if rung == 'plain' then return {put(nil), 1} end
    return {put({rung = rung, since = now, probe_at = now + after, backoff = after,
                 why = 'a probe on ' .. rung .. ' was not blocked', from = current}), 1}
  end
  state.backoff = math.min(tonumber(state.backoff) * 2, most)
  state.probe_at = now + state.backoff
  return {put(state), 0}
end
return redis.error_reply('crawlhub.ladder: unknown op ' .. tostring(op))
"""


def read_ladder(server: redis.Redis) -> dict[str, dict[str, Any]]:
    """Every domain off the plain rung, as the cluster has it."""
    out = {}
    raw: dict[Any, Any] = server.hgetall(LADDER) or {}
    for domain, value in raw.items():
        try:
            out[text(domain)] = json.loads(value)
        except ValueError:
            continue
    return out


class LadderCopy:
    """A worker's copy of the ladder (domain -> state), for one component: read again every ``refresh`` seconds,
    and changed at once by the ``ladder_moved`` signal (:meth:`moved`) when this worker moves a domain. That is
    how it learns that the cluster's ladder changed."""

    def __init__(self, refresh: float) -> None:
        self.refresh = refresh
        self.ladder: dict[str, dict[str, Any]] = {}
        self.loaded = float("-inf")

    def moved(self, domain: str, state: dict[str, Any] | None) -> None:
        if state is None:
            self.ladder.pop(domain, None)
        else:
            self.ladder[domain] = state

    def current(self, server: redis.Redis | None) -> dict[str, dict[str, Any]]:
        """The copy, read again from ``server`` when it is older than ``refresh``; Redis down, the copy as it is
        (with a warning)."""
        if server is not None and time.monotonic() - self.loaded >= self.refresh:
            from crawlhub.connection import REDIS_ERRORS

            try:
                self.ladder = read_ladder(server)
                self.loaded = time.monotonic()
            except REDIS_ERRORS as exc:
                logger.warning("Redis unavailable (%s): using the domains' rungs known so far", exc)
        return self.ladder

    def state(self, server: redis.Redis | None, domain: str) -> dict[str, Any] | None:
        """The domain's state (None: plain), from :meth:`current`."""
        return self.current(server).get(domain)


def ladder_rows(ladder: dict[str, dict[str, Any]], now: float) -> list[list[str]]:
    """Each domain off the plain rung: domain, rung, since when, why, and when the rung below is probed next
    (``crawlhub status``, ``crawlhub ui``, the report)."""
    rows = []
    for domain, state in sorted(ladder.items()):
        probe = float(state.get("probe_at", 0)) - now
        rows.append([domain, str(state.get("rung", "?")),
                     time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(state.get("since", 0)))),
                     str(state.get("why", "")),
                     f"{state.get('from', 'the rung below')} in {probe:.0f} s" if probe > 0 else "with its next request"])
    return rows


def format_ladder(ladder: dict[str, dict[str, Any]], now: float | None = None) -> list[str]:
    """``crawlhub status``'s lines."""
    rows = ladder_rows(ladder, time.time() if now is None else now)
    return [f"  {domain:32} {rung:11} since {since} ({why}); probes {probe}" for domain, rung, since, why, probe in rows]
