"""Every Redis key name crawlhub uses, in one place (docs/redis-keys.md).

Per spider: :class:`Keys` (``Keys.for_spider(settings, name)``); the frontier,
the middlewares, the extensions and the CLI all take their names from it.
Cluster-wide (shared by every spider): the constants and functions below.
Lua scripts get the per-spider names in their ``ctx`` argument; the
per-domain prefix :data:`DOMAIN` is the one name the scripts spell
themselves (``lua/_helpers.lua``), checked by tests/integration/test_lua.py.
"""

from __future__ import annotations

import functools
import string
import zlib
from binascii import crc_hqx
from dataclasses import asdict, dataclass, replace

from scrapy.settings import BaseSettings

from crawlhub.roles import LANES, split_queue

# -- per domain, shared by every spider (politeness belongs to the domain) -------------------------------
DOMAIN = "crawlhub:domain:"  # + <domain>: hash (rate state); + <domain>:active: zset of downloads
DOMAINS = "crawlhub:domains"  # zset: domain -> last time it was granted a request (the 1,000 latest: tick.lua)
LIMITS = "crawlhub:limits"  # hash: domain -> run-time limits (JSON)
ROBOTS = "crawlhub:robots:"  # + <origin>: hash (a robots.txt); + <origin>:lock
BROWSER_DOMAINS = "crawlhub:browser_domains"  # set: domains every worker renders in the browser
BROWSER_COUNTS = "crawlhub:browser:"  # + <domain>: hash (plain, fallback)

# -- proxies and header profiles, shared by every spider -----------------------------------------------
# The proxy failure script touches health, dead, domains and a domain's cool/strikes/tier keys together:
# they share the hash tag {proxy} (one Redis Cluster slot for all proxy state; a few commands per download).
PROXY_REGISTRY = "crawlhub:proxies"  # hash: proxy id -> JSON (no credentials)
PROXY_HEALTH = "crawlhub:{proxy}:health"  # hash: <id>:ok, <id>:fail, <id>:streak, <id>:error, <id>:used
PROXY_DEAD = "crawlhub:{proxy}:dead"  # hash: proxy id -> dead until (unix time)
PROXY_DOMAINS = "crawlhub:{proxy}:domains"  # set: domains with proxy state
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
    return f"crawlhub:{{proxy}}:cool:{domain}"  # hash: proxy id -> cooling until (unix time)


def proxy_strikes(domain: str) -> str:
    return f"crawlhub:{{proxy}}:strikes:{domain}"  # hash: proxy id -> failures in a row on the domain


def proxy_tier(domain: str) -> str:
    return f"crawlhub:{{proxy}}:tier:{domain}"  # string (expires): the pool the domain uses now


def proxy_tier_bans(domain: str, pool: str) -> str:
    return f"crawlhub:{{proxy}}:tierbans:{domain}:{pool}"  # counter (expires): bans in that pool


def seeds_key(settings: BaseSettings, spider: str) -> str:
    return str(settings.get("REDIS_START_URLS_KEY", "%(name)s:start_urls")) % {"name": spider}


SLOTS = 16384  # Redis Cluster's hash slots: CRC16 (XMODEM) of the key's hash tag, its low 14 bits
_SUFFIX = 3  # characters appended to a placed tag


@functools.cache
def _suffix_table() -> dict[int, str]:
    """Low 14 bits of CRC16 (from 0) -> the first 3-letter suffix (A-Za-z0-9) with them: all 16384 are met."""
    table: dict[int, str] = {}
    letters = [c.encode() for c in string.ascii_letters + string.digits]
    for a in letters:
        after_a = crc_hqx(a, 0)
        for b in letters:
            after_b = crc_hqx(b, after_a)
            for c in letters:
                v = crc_hqx(c, after_b) & (SLOTS - 1)
                if v not in table:
                    table[v] = (a + b + c).decode()
    return table


@functools.cache
def placed_tag(spider: str, p: int, partitions: int) -> str:
    """Partition ``p``'s hash tag (without braces), ``<spider>:<p>:<3 letters>``, chosen so that its slot is
    the middle of the p-th of ``partitions`` equal shares of the slots: a cluster whose masters hold equal
    ranges of slots (as ``redis-cli --cluster create`` makes them) gets the same number of partitions on
    each master, give or take one. CRC16 is affine: crc(prefix + s) = crc(s) ^ crc(crc(prefix), zeros), so
    one table of suffixes serves every prefix."""
    prefix = f"{spider}:{p}:".encode()
    target = (2 * p + 1) * SLOTS // (2 * partitions)
    shift = crc_hqx(b"\0" * _SUFFIX, crc_hqx(prefix, 0)) & (SLOTS - 1)
    return f"{spider}:{p}:{_suffix_table()[target ^ shift]}"


def slot_of_tag(tag: str) -> int:
    """The Redis Cluster slot of the keys whose hash tag is ``tag`` (without braces)."""
    return crc_hqx(tag.encode(), 0) & (SLOTS - 1)


def partition_of(domain: str, partitions: int) -> int:
    """The partition a domain belongs to: a stable hash (CRC-32 of its name), the same on every worker. A lane's
    queue (``<domain>#<lane>``: crawlhub.roles) is in its domain's partition, with the domain's politeness."""
    domain = split_queue(domain)[0]
    return zlib.crc32(domain.encode("utf-8", "surrogatepass")) % partitions if partitions > 1 else 0


def schedule_key(schedule: str, lane: str = "") -> str:
    """A lane's schedule (crawlhub.roles): ``<schedule>:<lane>``; the domains' own queues' is ``schedule``."""
    return f"{schedule}:{lane}" if lane else schedule


@dataclass(frozen=True)
class PartKeys:
    """The keys of one partition of a spider's frontier: everything one Lua script touches.

    Untagged (one partition on a plain Redis: the layout crawlhub always had), the names are
    ``<spider>:requests``, ``<spider>:domains``... and the per-domain politeness state is
    cluster-wide (``crawlhub:domain:<d>``). Tagged (several partitions, or a Redis Cluster),
    every name starts with the partition's hash tag ``{<spider>:<p>}``, so one partition is
    one Redis Cluster slot and a script never crosses slots. ``paused``, ``budget``,
    ``budget_used`` and ``epoch`` are set untagged, and for the one partition of a grouped
    layout (they share its slot: Keys.one_call); ``limits`` untagged only. Else the client
    checks them (global to the spider or the cluster, in other slots).
    """

    tag: str  # "" untagged, else "{<spider>:<p>}"
    queue: str  # prefix: per domain, <queue>:<domain> (priorities) and <queue>:<domain>:<priority> (lists)
    schedule: str  # domains with queued requests -> when each may be asked next
    queued: str  # domain -> requests queued
    dupefilter: str  # prefix of the filter's keys
    seen: str  # URLs the filter took in
    inflight: str
    leases: str
    lease_seq: str
    delayed: str
    dlq: str
    revisits: str  # hash: fingerprint -> the due time the refresher last moved it for (exactly once per due time)
    domain: str  # prefix: <domain><d> (rate state, a hash) and <domain><d>:active (downloads now, a zset)
    known: str  # zset: domain -> last time it was granted a request (the 1,000 latest: tick.lua)
    paused: str | None = None
    budget: str | None = None
    budget_used: str | None = None
    limits: str | None = None
    epoch: str | None = None

    @property
    def anchor(self) -> str:
        """The key a script call names in KEYS, so that a cluster client sends it to the partition's node."""
        return self.inflight

    def domain_state(self, domain: str) -> str:
        return self.domain + domain

    def domain_active(self, domain: str) -> str:
        return f"{self.domain}{domain}:active"

    def prefixes(self) -> tuple[str, ...]:
        """The prefixes whose keys are ``<prefix>:...`` (per domain, per bucket)."""
        return self.queue, self.dupefilter

    def names(self) -> list[str]:
        """The partition's fixed key names (shared cluster-wide names excluded)."""
        shared = {DOMAINS, LIMITS}
        return [*(v for k, v in asdict(self).items() if k not in ("tag", "domain") and v and v not in shared),
                *(schedule_key(self.schedule, lane) for lane in LANES if lane)]  # (the lanes': crawlhub.roles)


# the spider's keys that every lease round reads (or writes, the hints and the budget): one hash tag for all of
# them when the frontier is tagged (Keys.grouped), so that on a Redis Cluster they are one master's
GROUPED = ("epoch", "paused", "budget", "budget_used", "budget_held", "ready")

PART_FIELDS = ("queue", "schedule", "queued", "dupefilter", "seen", "inflight", "leases", "lease_seq", "delayed", "dlq",
               "revisits")


@dataclass(frozen=True)
class Keys:
    """The Redis keys of one spider (every field is a key name or a prefix).

    The fields are the keys global to the spider; :meth:`part` gives a partition's keys
    (docs/frontier.md: partitions; docs/redis-keys.md lists every key with its slot).
    """

    spider: str
    seeds: str
    dupefilter_config: str  # the settings the filter was made with
    budget: str
    budget_used: str
    reclaim_lock: str
    reclaim_turn: str  # INCR by each reclaim scan: which share of the partitions it looks at (every one in turn)
    stats: str  # cluster-wide counters of the frontier and robots.txt
    paused: str  # set by `crawlhub pause`: no worker leases while it exists
    bad_seeds: str
    bad_requests: str
    workers: str  # heartbeats (crawlhub.extensions.workers)
    stats_totals: str  # crawlhub.stats: counters of the whole crawl
    stats_minutes: str  # prefix: <stats_minutes>:<minute> per-minute counters
    log: str  # the audit log (a stream)
    refresher: str  # lock: the one worker moving due URLs into the frontier
    layout: str  # the frontier's partition count, recorded by its first worker
    # the frontier's epoch (JSON {id, why, at}): made by its first worker, moved by `crawlhub reset`; gone or
    # made anew ("created") under a worker that knew another one: the frontier vanished (docs/frontier.md)
    epoch: str
    incidents: str  # list: what workers saw go wrong with the frontier itself (it vanished), newest first
    ready: str  # zset (tagged only): partition -> when it may next have a request ready (a hint, in ms)
    seeded: str  # JSON {worker, at, urls}: the spider's start_urls were pushed to its seeds for this crawl (once)
    # prefix too: the sessions shared by the cluster (crawlhub.sessions): the pool, <sessions>:stats, <sessions>:c:<id>
    sessions: str
    partitions: int = 1
    tagged: bool = False
    # the partitions' tags are placed (placed_tag: even over a cluster's masters); False: {<spider>:<p>}, the
    # tags of a frontier laid out before crawlhub placed them (its record at ``layout`` says "tagged")
    placed: bool = False
    # the keys every lease round reads (GROUPED) share partition 0's hash tag, so that on a Redis Cluster a round
    # asks one master for them, the one of partition 0, not up to one per key; False: ``<spider>:<name>``, the
    # names of a frontier laid out before crawlhub grouped them (its record says "placed" or "tagged")
    grouped: bool = False
    queue_key: str = ""  # SCHEDULER_QUEUE_KEY, expanded (untagged partition's queue prefix)
    dupefilter_key: str = ""  # SCHEDULER_DUPEFILTER_KEY, expanded
    # zset (tagged, under a budget): the budget a lease round has reserved and not yet counted in budget_used,
    # "<requests>\t<round>" -> when the reservation lapses (a worker killed mid-round: not held for ever)
    budget_held: str = ""

    @classmethod
    def for_spider(cls, settings: BaseSettings, spider: str, partitions: int | None = None,
                   cluster: bool = False) -> Keys:
        """``partitions``: FRONTIER_PARTITIONS unless given; ``cluster``: the server is a Redis Cluster
        (every partition is tagged then, even a single one)."""
        dupefilter = str(settings.get("SCHEDULER_DUPEFILTER_KEY", "%(spider)s:dupefilter")) % {"spider": spider}
        count = partitions if partitions is not None else settings.getint("FRONTIER_PARTITIONS", 1)
        if count < 1:
            raise ValueError(f"FRONTIER_PARTITIONS must be 1 or more, not {count}")
        return cls(
            spider=spider,
            seeds=seeds_key(settings, spider),
            dupefilter_config=f"{dupefilter}:config",
            budget="",
            budget_used="",
            reclaim_lock=f"{spider}:reclaim_lock",
            reclaim_turn=f"{spider}:reclaim_turn",
            stats=f"{spider}:stats",
            paused="",
            bad_seeds=f"{spider}:bad_seeds",
            bad_requests=f"{spider}:bad_requests",
            workers=f"{spider}:workers",
            stats_totals=f"{spider}:stats:totals",
            stats_minutes=f"{spider}:stats:m",
            log=f"{spider}:log",
            refresher=f"{spider}:refresher",
            layout=f"{spider}:partitions",
            epoch="",  # (GROUPED: named by with_partitions)
            incidents=f"{spider}:incidents",
            ready="",
            seeded=f"{spider}:seeded",
            sessions=f"{spider}:{{{spider}}}:sessions",  # (tag {<spider>}: one slot for the pool, its cookies, counters)
            queue_key=str(settings.get("SCHEDULER_QUEUE_KEY", "%(spider)s:requests")) % {"spider": spider},
            dupefilter_key=dupefilter,
        ).with_partitions(count, cluster)

    def with_partitions(self, partitions: int, cluster: bool = False, placed: bool | None = None,
                        grouped: bool | None = None) -> Keys:
        """These keys for another layout: ``placed`` and ``grouped`` default to a new frontier's (placed tags with
        several partitions; grouped when tagged), as a frontier recorded before either has them when given."""
        tagged = partitions > 1 or cluster
        placed = partitions > 1 if placed is None else placed and partitions > 1
        # (grouping came after placing: a frontier recorded with unplaced tags has its round's keys ungrouped)
        grouped = tagged and (placed or partitions == 1) if grouped is None else grouped and tagged
        out = replace(self, partitions=partitions, tagged=tagged, placed=placed, grouped=grouped)
        group = out.tag(0) + ":" if out.grouped else f"{self.spider}:"
        return replace(out, epoch=group + "epoch", paused=group + "paused", budget=group + "budget",
                       budget_used=group + "budget_used", budget_held=group + "budget_held",
                       ready=group + "ready")  # (GROUPED)

    @property
    def one_call(self) -> bool:
        """A round is one script call: one partition whose script can read the keys of a round itself (untagged, on
        one server; or grouped: in its slot). Else the client reads them first, and the hints say which
        partitions to ask."""
        return self.partitions == 1 and (not self.tagged or self.grouped)

    @property
    def layout_record(self) -> str:
        """What ``layout`` holds for this layout: ``<partitions>``, then ``:grouped`` (placed tags with several
        partitions, the round's keys grouped: a new tagged frontier), or, as recorded before crawlhub grouped
        them, ``:placed`` or ``:tagged``."""
        kind = "grouped" if self.grouped else "placed" if self.placed else "tagged" if self.tagged else ""
        return f"{self.partitions}:{kind}" if kind else str(self.partitions)

    def tag(self, p: int) -> str:
        """Partition ``p``'s hash tag, braces included ("" untagged)."""
        if not self.tagged:
            return ""
        return "{" + (placed_tag(self.spider, p, self.partitions) if self.placed else f"{self.spider}:{p}") + "}"

    def part(self, p: int) -> PartKeys:
        """Partition ``p``'s keys."""
        if not 0 <= p < self.partitions:
            raise IndexError(f"partition {p} of {self.partitions}")
        s = self.spider
        if not self.tagged:
            return PartKeys(
                tag="", queue=self.queue_key, schedule=f"{s}:domains", queued=f"{s}:queued",
                dupefilter=self.dupefilter_key, seen=f"{self.dupefilter_key}:count", inflight=f"{s}:inflight",
                leases=f"{s}:leases", lease_seq=f"{s}:lease_seq", delayed=f"{s}:delayed", dlq=f"{s}:dlq",
                revisits=f"{s}:revisits", domain=DOMAIN, known=DOMAINS, paused=self.paused, budget=self.budget,
                budget_used=self.budget_used, limits=LIMITS, epoch=self.epoch)
        t = self.tag(p)
        # one grouped partition: the keys of a round are in its slot, and its script reads them (run-time limits
        # are cluster-wide: the client reads them, as for every tagged partition)
        own = {"paused": self.paused, "budget": self.budget, "budget_used": self.budget_used,
               "epoch": self.epoch} if self.one_call else {}
        return PartKeys(
            tag=t, queue=f"{t}:requests", schedule=f"{t}:domains", queued=f"{t}:queued", dupefilter=f"{t}:dupefilter",
            seen=f"{t}:dupefilter:count", inflight=f"{t}:inflight", leases=f"{t}:leases", lease_seq=f"{t}:lease_seq",
            delayed=f"{t}:delayed", dlq=f"{t}:dlq", revisits=f"{t}:revisits", domain=f"{t}:domain:",
            known=f"{t}:known", **own)

    @property
    def parts(self) -> list[PartKeys]:
        return [self.part(p) for p in range(self.partitions)]

    def partition_of(self, domain: str) -> int:
        return partition_of(domain, self.partitions)

    def part_of(self, domain: str) -> PartKeys:
        return self.part(self.partition_of(domain))

    def minute(self, minute: int) -> str:
        return f"{self.stats_minutes}:{minute}"

    # -- one partition: its keys under the names they always had (keys.queue, keys.inflight...) -----------
    def _only(self) -> PartKeys:
        if self.partitions != 1:
            raise AttributeError(f"{self.spider}'s frontier has {self.partitions} partitions: use keys.part(p) or "
                                 "keys.parts for its per-partition keys")
        return self.part(0)

    queue = property(lambda self: self._only().queue)
    schedule = property(lambda self: self._only().schedule)
    queued = property(lambda self: self._only().queued)
    dupefilter = property(lambda self: self._only().dupefilter)
    seen = property(lambda self: self._only().seen)
    inflight = property(lambda self: self._only().inflight)
    leases = property(lambda self: self._only().leases)
    lease_seq = property(lambda self: self._only().lease_seq)
    delayed = property(lambda self: self._only().delayed)
    dlq = property(lambda self: self._only().dlq)
    revisits = property(lambda self: self._only().revisits)

    def names(self) -> dict[str, str]:
        """Field -> key name (prefixes included: what they prefix is found with SCAN): the spider's global
        keys and, with one partition, the partition's under their own field names."""
        out = {k: v for k, v in asdict(self).items()
               if isinstance(v, str) and v and k not in ("spider", "queue_key", "dupefilter_key")}
        if self.partitions == 1:
            part = self.part(0)
            out.update({f: getattr(part, f) for f in PART_FIELDS})
        return out

    def prefixes(self) -> tuple[str, ...]:
        """The prefixes whose keys are ``<prefix>:...`` (per minute; with one partition, its per-domain queues and
        filter buckets too; with several, each partition's are in PartKeys.prefixes)."""
        if self.partitions == 1:
            return (*self.part(0).prefixes(), self.stats_minutes, self.sessions)
        return (self.stats_minutes, self.sessions)


def spider_keys(spider: str, settings: BaseSettings | None = None) -> Keys:
    """Keys.for_spider with crawlhub's default key settings when none are given."""
    return Keys.for_spider(settings if settings is not None else BaseSettings(), spider)
