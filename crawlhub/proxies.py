"""Proxy pools, rotation, and ban detection shared by the whole cluster.

- Pools come from ``PROXY_POOLS`` (``{"datacenter": ["http://user:pw@host:port", ...],
  "residential": [...]}``, also as JSON in the environment) and/or
  ``PROXY_FILE`` (one proxy per line: ``URL [pool=NAME] [country=CC] [name=ID]``).
  Each proxy is known by an id (its name, or ``pool/host:port``, plus a short
  hash of the user name when several share an address): the only thing logs,
  stats, Redis and ``crawlhub status`` ever show. Credentials stay in memory.
- ``ProxyMiddleware`` (order 380) picks a proxy per request: the domain's
  tier (``PROXY_TIERS``, cheapest first), or ``meta["proxy_pool"]`` /
  ``meta["proxy_country"]``; ``PROXY_ROTATION`` round_robin, random, or
  sticky per domain (cluster-wide). It skips proxies cooling down for the
  domain and dead ones, as every worker records them in Redis.
- ``ProxyBanMiddleware`` (order 900, next to the download) sees each raw
  answer first: a ban code (``PROXY_BAN_CODES``), a body marker
  (``PROXY_BAN_MARKERS`` and the spider's ``ban_markers``) or a connection
  error marks the proxy for that domain; after ``PROXY_BAN_AFTER`` in a row
  it cools down for ``PROXY_COOLDOWN`` seconds, doubling each time up to
  ``PROXY_COOLDOWN_MAX``. The page is fetched again at once through another
  proxy, which is not an attempt of the page: its retry count and the DLQ do
  not see it (at most ``PROXY_MAX_SWITCHES`` times, then the answer is the
  page's). After ``PROXY_ESCALATE_AFTER`` bans in a tier, or when none of
  its proxies is usable, the domain moves to the next tier for every worker
  (``PROXY_TIER_TTL`` seconds). With no usable proxy at all, the page waits
  as a retry and ends in the DLQ as "no healthy proxy".

docs/anti-blocking.md has the rules, settings and Redis keys.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import redis

from crawlhub import meta
from crawlhub._utils.hooks import call_hook
from crawlhub.frontier import keys
from crawlhub.frontier.records import text
from crawlhub.frontier.scripts import source

logger = logging.getLogger(__name__)

# the proxies' Redis keys (crawlhub.frontier.keys)
REGISTRY, HEALTH, DEAD = keys.PROXY_REGISTRY, keys.PROXY_HEALTH, keys.PROXY_DEAD
DOMAINS, STICKY = keys.PROXY_DOMAINS, keys.PROXY_STICKY
cool_key, strikes_key, tier_key, tier_bans_key = keys.proxy_cool, keys.proxy_strikes, keys.proxy_tier, keys.proxy_tier_bans


SCHEMES = {"http", "https", "socks5", "socks5h", "socks4"}
# meta keys that hold a proxy's address or credentials for one download: never stored
PROXY, TRIED, SWITCHES = meta.PROXY, meta.PROXY_TRIED, meta.PROXY_SWITCHES  # (crawlhub.meta)


class ProxyConfigError(ValueError):
    """A proxy list that cannot be used, with where and why (never the credentials)."""


@dataclass(frozen=True)
class Proxy:
    id: str
    pool: str
    scheme: str
    host: str
    port: int
    country: str = ""
    username: str = field(default="", repr=False)
    password: str = field(default="", repr=False)

    def __repr__(self) -> str:  # never the credentials
        return f"Proxy({self.id})"

    __str__ = __repr__

    @property
    def address(self) -> str:
        """scheme://host:port: no credentials."""
        return f"{self.scheme}://{self.host}:{self.port}"

    @property
    def http(self) -> bool:
        """Scrapy's HTTP client speaks to HTTP(S) proxies only; SOCKS ones serve the browser."""
        return self.scheme in ("http", "https")

    def authorization(self) -> bytes | None:
        if not self.username:
            return None
        return b"Basic " + base64.b64encode(f"{self.username}:{self.password}".encode("latin-1"))

    def public(self) -> dict[str, Any]:
        return {"id": self.id, "pool": self.pool, "scheme": self.scheme, "host": self.host, "port": self.port,
                "country": self.country}


def parse_proxy(url: str, pool: str, country: str = "", name: str = "", where: str = "") -> Proxy:
    where = where or f"pool {pool!r}"
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError as exc:
        raise ProxyConfigError(f"{where}: not a proxy URL ({exc})") from None
    scheme = (parts.scheme or "").lower()
    if scheme not in SCHEMES:
        raise ProxyConfigError(f"{where}: scheme {scheme or '(none)'!r} is not one of {', '.join(sorted(SCHEMES))}")
    if not parts.hostname or port is None:
        raise ProxyConfigError(f"{where}: a proxy URL needs a host and a port ({scheme}://host:port)")
    user, password = unquote(parts.username or ""), unquote(parts.password or "")
    ident = name or f"{pool}/{parts.hostname}:{port}"
    if user and not name:  # providers put the session or country in the user name: same address, other proxy
        ident += "#" + hashlib.sha256(user.encode()).hexdigest()[:6]
    return Proxy(ident, pool, scheme, parts.hostname, port, country.lower(), user, password)


def parse_pools(pools: dict[str, Any] | None = None, file: str | Path | None = None) -> dict[str, list[Proxy]]:
    """Pools from PROXY_POOLS (a dict) and PROXY_FILE, in declaration order."""
    out: dict[str, list[Proxy]] = {}
    for pool, entries in (pools or {}).items():
        if isinstance(entries, str):
            entries = [e for e in entries.replace(",", " ").split() if e]
        if not isinstance(entries, list):
            raise ProxyConfigError(f"PROXY_POOLS[{pool!r}] must be a list of proxy URLs")
        for n, entry in enumerate(entries):
            where = f"PROXY_POOLS[{pool!r}][{n}]"
            if isinstance(entry, dict):
                proxy = parse_proxy(str(entry.get("url", "")), pool, str(entry.get("country", "")),
                                    str(entry.get("name", "")), where)
            else:
                proxy = parse_proxy(str(entry), pool, where=where)
            out.setdefault(pool, []).append(proxy)
    if file:
        path = Path(file)
        try:
            lines = path.read_text().splitlines()
        except OSError as exc:
            raise ProxyConfigError(f"PROXY_FILE {path}: {exc.strerror}") from None
        for lineno, line in enumerate(lines, 1):
            line = line.split("#", 1)[0].strip() if not line.lstrip().startswith("#") else ""
            if not line:
                continue
            url, *options = line.split()
            opts = {}
            for option in options:
                key, eq, value = option.partition("=")
                if not eq or key not in ("pool", "country", "name"):
                    raise ProxyConfigError(f"PROXY_FILE {path}:{lineno}: unknown option {key!r} (pool=, country=, name=)")
                opts[key] = value
            pool = opts.get("pool", "default")
            out.setdefault(pool, []).append(
                parse_proxy(url, pool, opts.get("country", ""), opts.get("name", ""), f"PROXY_FILE {path}:{lineno}"))
    ids = [p.id for ps in out.values() for p in ps]
    dupes = sorted({i for i in ids if ids.count(i) > 1})
    if dupes:
        raise ProxyConfigError(f"the same proxy is listed twice: {', '.join(dupes)} (give one a name=)")
    return out


def cooldown(strikes: int, ban_after: int, base: float, most: float) -> float:
    """Seconds a proxy cools down on a domain after ``strikes`` failures in a row (0: not yet)."""
    if strikes < ban_after:
        return 0.0
    return float(min(most, base * 2 ** (strikes - ban_after)))


# One failure of a proxy on a domain; a domain moving to the next pool (crawlhub/frontier/lua/)
FAIL, ESCALATE = source("proxy_fail"), source("proxy_escalate")


def proxy_health(server: redis.Redis) -> dict[str, Any]:
    """Each known proxy's state for `crawlhub status` / `crawlhub proxies` (ids only, never credentials).

    {"proxies": [{id, pool, host, port, country, state: ok|cooling|dead, until, cooling_on,
                  ok, failures, success_rate, last_error}], "tiers": {domain: pool}}
    """
    now = time.time()
    registry = {text(k): json.loads(v) for k, v in server.hgetall(REGISTRY).items()}
    health = {text(k): text(v) for k, v in server.hgetall(HEALTH).items()}
    dead = {text(k): float(v) for k, v in server.hgetall(DEAD).items()}
    domains = sorted(text(d) for d in server.smembers(DOMAINS))
    pipe = server.pipeline(transaction=False)
    for d in domains:
        pipe.hgetall(cool_key(d)).get(tier_key(d))
    out = pipe.execute()
    cooling: dict[str, dict[str, float]] = {}
    tiers = {}
    for i, d in enumerate(domains):
        for pid, until in out[2 * i].items():
            if float(until) > now:
                cooling.setdefault(pid.decode(), {})[d] = float(until)
        if out[2 * i + 1]:
            tiers[d] = out[2 * i + 1].decode()
    rows = []
    for pid in sorted(set(registry) | {k.rsplit(":", 1)[0] for k in health}):
        info = registry.get(pid, {"id": pid})
        ok, fail = int(health.get(f"{pid}:ok", 0)), int(health.get(f"{pid}:fail", 0))
        state, until = "ok", None
        if dead.get(pid, 0) > now:
            state, until = "dead", dead[pid]
        elif pid in cooling:
            state, until = "cooling", max(cooling[pid].values())
        rows.append({**info, "id": pid, "state": state, "until": until, "cooling_on": cooling.get(pid, {}),
                     "ok": ok, "failures": fail, "success_rate": round(ok / (ok + fail), 3) if ok + fail else None,
                     "last_error": health.get(f"{pid}:error", "")})
    return {"proxies": rows, "tiers": tiers}


def ban_markers(settings: Any, spider: Any) -> list[str]:
    """The ban markers in force: PROXY_BAN_MARKERS and the spider's ``ban_markers``, lower-case."""
    return [m.lower() for m in [*settings.getlist("PROXY_BAN_MARKERS"), *(getattr(spider, "ban_markers", ()) or ())]]


def marker_in(response: Any, markers: list[str]) -> str:
    """Why a page's text shows a ban ('' = none of ``markers`` is in its first 200,000 characters)."""
    if markers and hasattr(response, "text"):
        text_ = response.text[:200_000].lower()
        for marker in markers:
            if marker in text_:
                return f"ban marker {marker!r}"
    return ""


def block_reason(response: Any, codes: set[int], markers: list[str], spider: Any) -> str:
    """Why an answer shows blocking ('' = it does not): a status in ``codes``, one of ``markers`` in its text, or
    the spider's ``is_blocked(response)`` (True or a reason: a challenge page that answers 200, say). An error in
    the spider's hook raises :class:`~crawlhub._utils.hooks.SpiderHookError` (reported as the spider's)."""
    if response.status in codes:
        return f"HTTP {response.status}"
    why = marker_in(response, markers)
    if not why and getattr(spider, "is_blocked", None) is not None:
        verdict = call_hook(spider, "is_blocked", response, url=response.url)
        if verdict:
            why = verdict if isinstance(verdict, str) else "the spider's is_blocked"
    return why


def format_health(health: dict[str, Any]) -> list[str]:
    lines = []
    for p in health["proxies"]:
        when = time.strftime("%H:%M:%S", time.localtime(p["until"])) if p["until"] else ""
        state = {"ok": "ok", "cooling": f"cooling until {when}", "dead": f"dead until {when}"}[p["state"]]
        rate = f"{p['success_rate'] * 100:.0f}%" if p["success_rate"] is not None else "-"
        where = f" on {', '.join(sorted(p['cooling_on']))}" if p["state"] == "cooling" else ""
        error = f"  last error: {p['last_error']}" if p["last_error"] and p["state"] != "ok" else ""
        lines.append(f"  {p['id']:40} {p.get('pool', '?'):12} {state}{where}  ok={p['ok']} failed={p['failures']} "
                     f"success={rate}{error}")
    for domain, pool in sorted(health["tiers"].items()):
        lines.append(f"  {domain} uses pool {pool!r}")
    return lines


def reset_state(server: redis.Redis, domain: str | None = None) -> int:
    """Forget cool-downs, dead marks, failure counts and escalations (all, or one domain's); keys removed."""
    domains = [domain] if domain else [text(d) for d in server.smembers(DOMAINS)]
    names = [k for d in domains for k in (cool_key(d), strikes_key(d), tier_key(d))]
    names += [k.decode() for d in domains for k in server.scan_iter(tier_bans_key(d, "*"), count=1000)]
    if domain:
        server.srem(DOMAINS, domain)
    else:
        names += [DEAD, HEALTH, DOMAINS, STICKY]
    return int(server.delete(*names)) if names else 0
