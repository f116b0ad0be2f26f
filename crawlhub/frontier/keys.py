"""Every Redis key name crawlhub uses, in one place (docs/redis-keys.md).

Per spider: :class:`Keys` (``Keys.for_spider(settings, name)``); the frontier,
the middlewares, the extensions and the CLI all take their names from it.
Cluster-wide (shared by every spider): the constants and functions below.
Lua scripts get the per-spider names in their ``ctx`` argument; the
per-domain prefix :data:`DOMAIN` is the one name the scripts spell
themselves (``lua/_helpers.lua``), checked by tests/test_lua.py.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from scrapy.settings import BaseSettings

# -- per domain, shared by every spider (politeness belongs to the domain) -------------------------------
DOMAIN = "crawlhub:domain:"  # + <domain>: hash (rate state); + <domain>:active: zset of downloads
DOMAINS = "crawlhub:domains"  # zset: domain -> last time it was granted a request
LIMITS = "crawlhub:limits"  # hash: domain -> run-time limits (JSON)
ROBOTS = "crawlhub:robots:"  # + <origin>: hash (a robots.txt); + <origin>:lock
BROWSER_DOMAINS = "crawlhub:browser_domains"  # set: domains every worker renders in the browser
BROWSER_COUNTS = "crawlhub:browser:"  # + <domain>: hash (plain, fallback)

# -- proxies and header profiles, shared by every spider -----------------------------------------------
PROXY_REGISTRY = "crawlhub:proxies"  # hash: proxy id -> JSON (no credentials)
PROXY_HEALTH = "crawlhub:proxy:health"  # hash: <id>:ok, <id>:fail, <id>:streak, <id>:error, <id>:used
PROXY_DEAD = "crawlhub:proxy:dead"  # hash: proxy id -> dead until (unix time)
PROXY_DOMAINS = "crawlhub:proxy:domains"  # set: domains with proxy state
PROXY_STICKY = "crawlhub:proxy:sticky"  # hash: domain -> proxy id (PROXY_ROTATION = sticky)
PROFILES_STICKY = "crawlhub:profiles:sticky"  # hash: sticky key (proxy id or domain) -> profile id

# -- the demo's mark on the Redis database it owns ------------------------------------------------------
DEMO_MARK = "crawlhub:demo"


def domain_state(domain: str) -> str:
    return DOMAIN + domain


def domain_active(domain: str) -> str:
    return f"{DOMAIN}{domain}:active"


def robots(origin: str) -> str:
    return ROBOTS + origin


def browser_counts(domain: str) -> str:
    return BROWSER_COUNTS + domain


def proxy_cool(domain: str) -> str:
    return f"crawlhub:proxy:cool:{domain}"  # hash: proxy id -> cooling until (unix time)


def proxy_strikes(domain: str) -> str:
    return f"crawlhub:proxy:strikes:{domain}"  # hash: proxy id -> failures in a row on the domain


def proxy_tier(domain: str) -> str:
    return f"crawlhub:proxy:tier:{domain}"  # string (expires): the pool the domain uses now


def proxy_tier_bans(domain: str, pool: str) -> str:
    return f"crawlhub:proxy:tierbans:{domain}:{pool}"  # counter (expires): bans in that pool


def seeds_key(settings: BaseSettings, spider: str) -> str:
    return str(settings.get("REDIS_START_URLS_KEY", "%(name)s:start_urls")) % {"name": spider}


@dataclass(frozen=True)
class Keys:
    """The Redis keys of one spider (every field is a key name or a prefix)."""

    seeds: str
    queue: str  # prefix: per domain, <queue>:<domain> (priorities) and <queue>:<domain>:<priority> (lists)
    schedule: str  # domains with queued requests -> when each may be asked next
    queued: str  # domain -> requests queued
    dupefilter: str  # prefix of the filter's keys
    seen: str  # URLs the filter took in
    dupefilter_config: str  # the settings the filter was made with
    inflight: str
    leases: str
    lease_seq: str
    delayed: str
    dlq: str
    budget: str
    budget_used: str
    reclaim_lock: str
    stats: str  # cluster-wide counters of the frontier and robots.txt
    paused: str  # set by `crawlhub pause`: no worker leases while it exists
    bad_seeds: str
    bad_requests: str
    workers: str  # heartbeats (crawlhub.extensions.workers)
    stats_totals: str  # crawlhub.stats: counters of the whole crawl
    stats_minutes: str  # prefix: <stats_minutes>:<minute> per-minute counters
    log: str  # the audit log (a stream)
    revisits: str  # hash: fingerprint -> the due time the refresher last moved it for (exactly once per due time)
    refresher: str  # lock: the one worker moving due URLs into the frontier

    @classmethod
    def for_spider(cls, settings: BaseSettings, spider: str) -> Keys:
        dupefilter = str(settings.get("SCHEDULER_DUPEFILTER_KEY", "%(spider)s:dupefilter")) % {"spider": spider}
        return cls(
            seeds=seeds_key(settings, spider),
            queue=str(settings.get("SCHEDULER_QUEUE_KEY", "%(spider)s:requests")) % {"spider": spider},
            schedule=f"{spider}:domains",
            queued=f"{spider}:queued",
            dupefilter=dupefilter,
            seen=f"{dupefilter}:count",
            dupefilter_config=f"{dupefilter}:config",
            inflight=f"{spider}:inflight",
            leases=f"{spider}:leases",
            lease_seq=f"{spider}:lease_seq",
            delayed=f"{spider}:delayed",
            dlq=f"{spider}:dlq",
            budget=f"{spider}:budget",
            budget_used=f"{spider}:budget_used",
            reclaim_lock=f"{spider}:reclaim_lock",
            stats=f"{spider}:stats",
            paused=f"{spider}:paused",
            bad_seeds=f"{spider}:bad_seeds",
            bad_requests=f"{spider}:bad_requests",
            workers=f"{spider}:workers",
            stats_totals=f"{spider}:stats:totals",
            stats_minutes=f"{spider}:stats:m",
            log=f"{spider}:log",
            revisits=f"{spider}:revisits",
            refresher=f"{spider}:refresher",
        )

    def minute(self, minute: int) -> str:
        return f"{self.stats_minutes}:{minute}"

    def names(self) -> dict[str, str]:
        """Field -> key name (prefixes included: what they prefix is found with SCAN)."""
        return asdict(self)

    def prefixes(self) -> tuple[str, ...]:
        """The prefixes whose keys are ``<prefix>:...`` (per domain, per bucket, per minute)."""
        return self.queue, self.dupefilter, self.stats_minutes


def spider_keys(spider: str, settings: BaseSettings | None = None) -> Keys:
    """Keys.for_spider with crawlhub's default key settings when none are given."""
    return Keys.for_spider(settings if settings is not None else BaseSettings(), spider)
