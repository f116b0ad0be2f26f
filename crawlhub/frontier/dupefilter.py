"""The shared duplicate filter.

Fingerprints are Scrapy's own (``crawler.request_fingerprinter``), so
REQUEST_FINGERPRINTER_CLASS applies as in plain Scrapy. The frontier's
tick script checks and records them (``lua/tick.lua``, :mod:`crawlhub.frontier.operations`);
the classes here say how (``DUPEFILTER_MODE``):

``exact`` (default)
    the first 64 bits of the fingerprint, as an integer, in one of
    ``DUPEFILTER_BUCKETS`` Redis sets (``<dupefilter>:<bucket>``, bucket from
    the next bits). Sets of integers up to ``set-max-intset-entries`` (512 by
    default) are stored by Redis as packed arrays: about 8.5 bytes per URL
    instead of ~85 for a set of 40-character hex strings. No false positive
    beyond a 64-bit collision (the chance of any at all among a million URLs
    is about 3 in 10^8). Keep URLs per bucket under the intset limit:
    buckets >= expected URLs / 400 (4096 buckets: ~1.6 M URLs), or raise
    ``set-max-intset-entries`` on the server.
``bloom``
    a Bloom filter sized for ``DUPEFILTER_BLOOM_CAPACITY`` URLs at
    ``DUPEFILTER_BLOOM_ERROR_RATE`` false positives: RedisBloom's BF.ADD when
    the server has the module, else a Redis bitmap (``<dupefilter>:bloom``)
    with k bit positions from the fingerprint (double hashing). About 1.8
    bytes per URL at 0.1%. A false positive means a URL is not crawled.

``<dupefilter>:count`` counts the URLs taken in. Closing a worker never
clears the filter: other workers are still using it.
"""

from __future__ import annotations

import hashlib
import json
import math
from typing import TYPE_CHECKING, Any, Protocol

import redis
from scrapy import Request, Spider
from scrapy.crawler import Crawler
from scrapy.dupefilters import BaseDupeFilter
from scrapy.settings import BaseSettings
from scrapy.utils.request import RequestFingerprinterProtocol, fingerprint

from crawlhub.frontier.records import text

if TYPE_CHECKING:
    from typing_extensions import Self

MAX_BITMAP_BITS = 2**32  # Redis strings stop at 512 MB
MODES = ("exact", "bloom")  # DUPEFILTER_MODE


class Filter(Protocol):
    """What the tick script needs of a duplicate filter: the operation for one fingerprint."""

    key: str

    def spec(self, fp: str | bytes) -> list[Any]: ...


def fingerprint_bytes(fp: str | bytes) -> bytes:
    """A fingerprint as bytes: Scrapy's digest, its hex form, or any other string (hashed)."""
    if isinstance(fp, bytes):
        return fp
    try:
        return bytes.fromhex(fp)
    except ValueError:
        return hashlib.sha1(fp.encode()).digest()


class RecentFingerprints:
    """The fingerprints this worker sent the shared filter lately (FRONTIER_LOCAL_FILTER_SIZE of them,
    in two generations): a link met again (a site's menu on every page, the pagination) is dropped
    in the worker instead of being sent to Redis to be found a duplicate there.

    Only what the shared filter already has, or is about to get with the next round, is here: a
    dropped link is a duplicate in Redis too. Requests with dont_filter, and those that replace a
    lease (a redirect), always go to Redis.
    """

    def __init__(self, size: int):
        self.size = max(1, size)
        self.current: set[int] = set()
        self.previous: set[int] = set()

    @staticmethod
    def key(fp: str | bytes) -> int:
        return int.from_bytes(fingerprint_bytes(fp)[:8], "big")

    def __contains__(self, key: int) -> bool:
        return key in self.current or key in self.previous

    def add(self, key: int) -> None:
        self.current.add(key)
        if len(self.current) >= self.size:
            self.previous, self.current = self.current, set()

    def clear(self) -> None:
        """The shared filter was replaced (a reset) or may have lost writes (Redis down, a failover)."""
        self.current, self.previous = set(), set()

    def __len__(self) -> int:
        return len(self.current) + len(self.previous)


class ExactFilter:
    def __init__(self, key: str, buckets: int = 4096):
        if buckets < 1:
            raise ValueError("DUPEFILTER_BUCKETS must be 1 or more")
        self.key, self.buckets = key, buckets

    def spec(self, fp: str | bytes) -> list[Any]:
        raw = fingerprint_bytes(fp)
        value = int.from_bytes(raw[:8], "big", signed=True)
        bucket = int.from_bytes(raw[8:12], "big") % self.buckets
        return ["s", f"{self.key}:{bucket:x}", str(value)]


class BloomFilter:
    """A Bloom filter on a Redis bitmap, k positions by double hashing."""

    def __init__(self, key: str, capacity: int, error_rate: float):
        if not 0 < error_rate < 1 or capacity < 1:
            raise ValueError("DUPEFILTER_BLOOM_CAPACITY must be >= 1 and DUPEFILTER_BLOOM_ERROR_RATE in (0, 1)")
        self.key = f"{key}:bloom"
        self.bits = math.ceil(-capacity * math.log(error_rate) / math.log(2) ** 2)
        if self.bits > MAX_BITMAP_BITS:
            raise ValueError(f"a Bloom filter of {capacity} URLs at {error_rate} needs {self.bits} bits; a Redis bitmap holds "
                             f"{MAX_BITMAP_BITS} (use RedisBloom, a lower capacity or a higher error rate)")
        self.hashes = max(1, round(self.bits / capacity * math.log(2)))

    def spec(self, fp: str | bytes) -> list[Any]:
        raw = hashlib.sha256(fingerprint_bytes(fp)).digest()
        h1, h2 = int.from_bytes(raw[:8], "big"), int.from_bytes(raw[8:16], "big") | 1
        return ["b", self.key, self.bits, *((h1 + i * h2) % self.bits for i in range(self.hashes))]


class RedisBloomFilter:
    """RedisBloom's scalable filter (BF.RESERVE once, BF.ADD per URL)."""

    def __init__(self, server: redis.Redis, key: str, capacity: int, error_rate: float):
        self.key = f"{key}:bf"
        try:
            server.execute_command("BF.RESERVE", self.key, error_rate, capacity)  # type: ignore[no-untyped-call]
        except Exception as exc:  # noqa: BLE001 - "item exists": another worker made it
            if "exists" not in str(exc).lower():
                raise

    def spec(self, fp: str | bytes) -> list[Any]:
        return ["f", self.key, fingerprint_bytes(fp).hex()]


def has_redisbloom(server: redis.Redis) -> bool:
    """Whether the server has the RedisBloom module. A server that refuses MODULE LIST (an ACL, a
    managed Redis) has none we may count on; any other error (Redis down) is raised, not taken for 'no'."""
    try:
        modules: list[dict[Any, Any]] = server.module_list()
    except redis.ResponseError:
        return False
    return any((m.get(b"name") or m.get("name")) in (b"bf", "bf") for m in modules)


class FilterMismatch(RuntimeError):
    """This worker's duplicate-filter settings differ from those the crawl's filter was made with."""


def filter_config(server: redis.Redis, settings: BaseSettings) -> dict[str, Any]:
    """What the duplicate filter of a crawl is made of: every worker of a spider must agree on it."""
    mode = settings.get("DUPEFILTER_MODE", "exact")
    if mode == "exact":
        return {"mode": "exact", "buckets": settings.getint("DUPEFILTER_BUCKETS", 4096)}
    if mode == "bloom":
        return {"mode": "bloom", "capacity": settings.getint("DUPEFILTER_BLOOM_CAPACITY"),
                "error_rate": settings.getfloat("DUPEFILTER_BLOOM_ERROR_RATE"),
                "backend": "redisbloom" if has_redisbloom(server) else "bitmap"}
    raise ValueError(f"DUPEFILTER_MODE must be {' or '.join(map(repr, MODES))}, not {mode!r}")


def claim_config(server: redis.Redis, key: str, config: dict[str, Any]) -> None:
    """Record the filter's config at ``<key>:config`` (the first worker), or check it against the record.

    Raises :class:`FilterMismatch` naming both: two configs would split the filter silently
    (another bucket, another bitmap size) and pages would be crawled twice.
    """
    wanted = json.dumps(config, sort_keys=True)
    if server.set(f"{key}:config", wanted, nx=True):
        return
    stored = text(server.get(f"{key}:config") or b"")
    if stored and stored != wanted:
        raise FilterMismatch(
            f"the duplicate filter {key} was made with {stored}, this worker has {wanted}: give every worker "
            "of a spider the same DUPEFILTER_* settings (or `crawlhub reset` the spider to start over)")


def make_filter(server: redis.Redis, settings: BaseSettings, key: str) -> Filter:
    """The filter DUPEFILTER_MODE asks for, after checking the crawl's workers agree on it."""
    config = filter_config(server, settings)
    claim_config(server, key, config)
    return _build(server, key, config, 1)


def make_filters(server: redis.Redis, settings: BaseSettings, keys: Any) -> list[Filter]:
    """One filter per partition of ``keys`` (crawlhub.frontier.keys.Keys), the crawl's config checked once.

    A Bloom filter of one partition is sized for its share of DUPEFILTER_BLOOM_CAPACITY (a domain's
    URLs all go to its partition's filter).
    """
    config = filter_config(server, settings)
    claim_config(server, keys.dupefilter_key, config)
    return [_build(server, part.dupefilter, config, keys.partitions) for part in keys.parts]


def _build(server: redis.Redis, key: str, config: dict[str, Any], partitions: int) -> Filter:
    if config["mode"] == "exact":
        return ExactFilter(key, config["buckets"])
    capacity = max(1, math.ceil(config["capacity"] / partitions))
    if config["backend"] == "redisbloom":
        return RedisBloomFilter(server, key, capacity, config["error_rate"])
    return BloomFilter(key, capacity, config["error_rate"])


class RedisDupeFilter(BaseDupeFilter):
    """DUPEFILTER_CLASS: the request fingerprint, with the project's REQUEST_FINGERPRINTER.

    The duplicate check itself is atomic in Redis (the tick script, with the
    :class:`Filter` above), so ``request_seen`` never filters here; ``close``
    keeps the shared filter (scrapy-redis's deletes it unless persisting).
    """

    def __init__(self, key: str, fingerprinter: RequestFingerprinterProtocol | None = None):
        self.key = key
        self.fingerprinter = fingerprinter

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        return cls("", crawler.request_fingerprinter)

    @classmethod
    def for_spider(cls, crawler: Crawler, spider: Spider) -> RedisDupeFilter:
        key = str(crawler.settings.get("SCHEDULER_DUPEFILTER_KEY")) % {"spider": spider.name}
        return cls(key, crawler.request_fingerprinter)

    def request_fingerprint(self, request: Request) -> str:
        if self.fingerprinter is not None:
            return self.fingerprinter.fingerprint(request).hex()
        return fingerprint(request).hex()


def seen_count(server: redis.Redis, key: str) -> int:
    """How many URLs the filter at ``key`` took in."""
    return int(server.get(f"{key}:count") or 0)
