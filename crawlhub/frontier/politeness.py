"""Cluster-wide politeness: per-domain rate and concurrency, enforced in Redis.

The limits of a domain, from the most specific:

1. run time: ``crawlhub limits set DOMAIN 2/s --concurrency 4`` writes
   ``crawlhub:limits`` (hash: domain -> JSON); every worker reads it on its
   next lease, so a change applies within a poll interval;
2. settings: ``DOMAIN_LIMITS = {"example.com": "2/s", "slow.org": {"rate": 0.5, "concurrency": 1}}``;
3. defaults: ``DOMAIN_RATE`` requests per second and ``DOMAIN_CONCURRENCY``
   downloads at once, per domain, for the whole cluster (0 = no limit).

On top of that the domain's own state (``crawlhub:domain:<d>``) may slow it
down: robots.txt's Crawl-delay is a floor on the interval between requests,
and 429/503 answers double a slow-down factor (Retry-After blocks the domain
until then) that successes bring back to 1. The lease script
(``lua/tick.lua``, through :mod:`crawlhub.frontier.operations`) applies all of it atomically.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass
from typing import Any

import redis
from scrapy.settings import BaseSettings

from crawlhub.frontier import keys
from crawlhub.frontier.records import text as _text
from crawlhub.frontier.scripts import Script, source

_RATE = re.compile(r"^\s*(?P<n>\d+(?:\.\d+)?)\s*(?:/\s*(?P<unit>s|sec|second|m|min|minute|h|hour))?\s*$", re.I)
_UNITS = {"s": 1, "sec": 1, "second": 1, "m": 60, "min": 60, "minute": 60, "h": 3600, "hour": 3600}


class BadLimit(ValueError):
    pass


def parse_rate(value: object) -> float:
    """Requests per second from "5", "5/s", "30/m", "100/h", 0 or "none" (no limit)."""
    if isinstance(value, (int, float)):
        rate = float(value)
    elif str(value).strip().lower() in {"none", "off", "unlimited", ""}:
        rate = 0.0
    else:
        m = _RATE.match(str(value))
        if not m:
            raise BadLimit(f"bad rate {value!r}: write it as 5/s, 30/m, 100/h, 0.5 (per second) or none")
        rate = float(m["n"]) / _UNITS[(m["unit"] or "s").lower()]
    if rate < 0:
        raise BadLimit(f"bad rate {value!r}: must be 0 (no limit) or more")
    return rate


def parse_limit(value: object) -> dict[str, Any]:
    """A DOMAIN_LIMITS entry: a rate ("2/s") or {"rate": ..., "concurrency": ...}."""
    if isinstance(value, dict):
        unknown = set(value) - {"rate", "concurrency"}
        if unknown:
            raise BadLimit(f"unknown limit field(s) {sorted(unknown)}: use rate and concurrency")
        out: dict[str, Any] = {}
        if value.get("rate") is not None:
            out["rate"] = parse_rate(value["rate"])
        if value.get("concurrency") is not None:
            out["concurrency"] = int(value["concurrency"])
            if out["concurrency"] < 0:
                raise BadLimit("concurrency must be 0 (no limit) or more")
        return out
    return {"rate": parse_rate(value)}


def format_rate(rate: float | None) -> str:
    if rate is None:
        return "-"
    if rate <= 0:
        return "no limit"
    return f"{rate:g}/s" if rate >= 1 else f"{rate * 60:g}/m"


@dataclass
class Politeness:
    """The politeness settings of a worker, and the domain-level Redis operations."""

    server: redis.Redis
    rate: float = 4.0
    concurrency: int = 8
    domains: dict[str, dict[str, Any]] | None = None
    burst: int = 1
    backoff_base: float = 0.5
    factor_max: float = 32.0
    recovery: float = 0.8
    recheck: float = 1.0
    slowdown_codes: frozenset[int] = frozenset({429, 503})
    layout: keys.Keys | None = None  # the frontier's partitions (where each domain's state lives); None: classic

    @classmethod
    def from_settings(cls, server: redis.Redis, settings: BaseSettings, layout: keys.Keys | None = None) -> Politeness:
        domains = settings.getdict("DOMAIN_LIMITS")
        try:
            parsed = {d.lower(): parse_limit(v) for d, v in domains.items()}
        except BadLimit as exc:
            raise BadLimit(f"DOMAIN_LIMITS: {exc}") from None
        return cls(
            server=server,
            rate=parse_rate(settings.get("DOMAIN_RATE")),
            concurrency=settings.getint("DOMAIN_CONCURRENCY"),
            domains=parsed,
            burst=max(1, settings.getint("DOMAIN_BURST")),
            backoff_base=settings.getfloat("DOMAIN_BACKOFF_BASE"),
            factor_max=settings.getfloat("DOMAIN_BACKOFF_MAX_FACTOR"),
            recovery=settings.getfloat("DOMAIN_RECOVERY"),
            slowdown_codes=frozenset(int(c) for c in settings.getlist("DOMAIN_SLOWDOWN_CODES")),
            layout=layout,
        )

    def __post_init__(self) -> None:
        self._reserve = Script(self.server, source("reserve"))

    def config(self) -> dict[str, Any]:
        """What the lease script needs (sent as JSON)."""
        conf: dict[str, Any] = {"rate": self.rate, "concurrency": self.concurrency, "burst": self.burst,
                "base": self.backoff_base, "recheck": self.recheck}
        if self.domains:
            conf["domains"] = self.domains
        return conf

    def outcome(self, status: int | None) -> str:
        """What an answer means for the domain's pace: "slow", "ok", or "" (neither, or no answer)."""
        if status is None:
            return ""
        if status in self.slowdown_codes:
            return "slow"
        return "ok" if status < 400 else ""

    def state_key(self, domain: str) -> str:
        """The domain's rate state: in its partition (tagged), else cluster-wide."""
        return self.layout.part_of(domain).domain_state(domain) if self.layout else keys.domain_state(domain)

    def reserve(self, domain: str) -> float:
        """Take the domain's next request slot; seconds to wait before using it."""
        part = self.layout.part_of(domain) if self.layout else None
        ctx: dict[str, Any] = {"domain": part.domain, "limits": part.limits} if part else {"domain": keys.DOMAIN,
                                                                                          "limits": keys.LIMITS}
        conf = self.config()
        if not ctx["limits"]:  # tagged: the limits hash is in another slot; its entry for the domain goes in conf
            ctx.pop("limits")
            runtime = get_limit(self.server, domain)
            if runtime:
                conf["domains"] = {**conf.get("domains", {}), domain: runtime}
        return float(self._reserve(keys=[self.state_key(domain)], args=[domain, json.dumps(conf), json.dumps(ctx)]))

    def set_crawl_delay(self, domain: str, delay: float | None) -> None:
        if delay:
            self.server.hset(self.state_key(domain), "delay", delay)
        else:
            self.server.hdel(self.state_key(domain), "delay")


# -- run-time limits and the domains' state (the `crawlhub limits` command) -------
def set_limit(server: redis.Redis, domain: str, rate: object = None, concurrency: int | None = None) -> dict[str, Any]:
    domain = domain.lower()
    current = get_limit(server, domain) or {}
    update = parse_limit({"rate": rate, "concurrency": concurrency})
    current.update(update)
    server.hset(keys.LIMITS, domain, json.dumps(current))
    return current


def read_limits(server: redis.Redis) -> dict[str, Any]:
    """Every run-time limit: domain -> {rate, concurrency}."""
    out: dict[str, Any] = {}
    for d, raw in server.hgetall(keys.LIMITS).items():
        try:
            out[_text(d)] = json.loads(raw)
        except ValueError:
            continue
    return out


def get_limit(server: redis.Redis, domain: str) -> dict[str, Any] | None:
    raw = server.hget(keys.LIMITS, domain.lower())
    return json.loads(raw) if raw else None


def clear_limit(server: redis.Redis, domain: str) -> bool:
    return bool(server.hdel(keys.LIMITS, domain.lower()))


def domain_state(server: redis.Redis, domain: str, now: float | None = None,
                 layouts: list[keys.Keys] | None = None) -> dict[str, Any]:
    """What `crawlhub limits show` prints for a domain (numbers from its Redis hash: cluster-wide,
    or in its partition of the first of ``layouts``, partitioned frontiers, that has one)."""
    now = time.time() if now is None else now
    state, active = keys.domain_state(domain), keys.domain_active(domain)
    for layout in layouts or []:
        part = layout.part_of(domain)
        if server.exists(part.domain_state(domain)):
            state, active = part.domain_state(domain), part.domain_active(domain)
            break
    raw = {_text(k): _text(v) for k, v in server.hgetall(state).items()}
    win, cnt, prev = int(raw.get("win", 0) or 0), int(raw.get("cnt", 0) or 0), int(raw.get("prev", 0) or 0)
    current = int(now // 10)
    if win == current:
        recent = prev * (1 - (now % 10) / 10) + cnt
    elif win == current - 1:
        recent = cnt * (1 - (now % 10) / 10)
    else:
        recent = 0.0
    until = float(raw.get("until", 0) or 0)
    return {
        "domain": domain,
        "rate_now": round(recent / 10, 3),
        "factor": float(raw.get("factor", 1) or 1),
        "blocked_for": round(max(0.0, until - now), 1),
        "crawl_delay": float(raw["delay"]) if raw.get("delay") else None,
        "active": server.zcount(active, now, "+inf"),
        "slowdowns": int(raw.get("slowdowns", 0) or 0),
        "last_request": float(raw["last"]) if raw.get("last") else None,
    }


def known_domains(server: redis.Redis, limit: int = 200, layouts: list[keys.Keys] | None = None) -> list[str]:
    """Domains most recently crawled first, and those with run-time limits."""
    seen: dict[str, float] = {}
    for zset in [keys.DOMAINS, *(part.known for layout in layouts or [] for part in layout.parts)]:
        rows: list[tuple[bytes, float]] = server.zrevrange(zset, 0, limit - 1, withscores=True)  # type: ignore[assignment]
        for d, at in rows:
            seen[_text(d)] = max(seen.get(_text(d), 0.0), float(at))
    recent = sorted(seen, key=lambda d: -seen[d])[:limit]
    limited = [_text(d) for d in server.hkeys(keys.LIMITS)]
    return recent + sorted(set(limited) - set(recent))
