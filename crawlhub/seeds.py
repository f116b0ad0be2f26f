"""Seeds from ``<spider>:start_urls``: plain URLs or JSON objects.

``redis-cli lpush quotes:start_urls https://quotes.toscrape.com/`` or
``redis-cli lpush quotes:start_urls '{"url": "...", "meta": {...}, "priority": 5}'``.
A seed that is not one of those raises :class:`BadSeed` with the reason.
"""

from __future__ import annotations

import inspect
import json
import re
import types
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import redis

from crawlhub.meta import OWN_PREFIX

# Keys a JSON seed may carry, with their JSON types.
JSON_SEED_KEYS = {
    "url": str,
    "meta": dict,
    "priority": int,
    "method": str,
    "headers": dict,
    "body": str,
    "callback": str,
    "cb_kwargs": dict,
    "dont_filter": bool,
    "sitemap": str,  # instead of "url": a robots.txt, sitemap index or sitemap whose pages feed the crawl
}


# an HTTP method is a token (RFC 9110, 9.1 and 5.6.2)
METHOD_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")


class BadSeed(ValueError):
    """A seed that cannot become a request; the message is the reason."""


@dataclass
class Seed:
    url: str
    meta: dict[str, Any] = field(default_factory=dict)
    priority: int = 0
    method: str = "GET"
    headers: dict[str, Any] = field(default_factory=dict)
    body: str = ""
    callback: str | None = None
    cb_kwargs: dict[str, Any] = field(default_factory=dict)
    dont_filter: bool = True
    sitemap: bool = False


def check_url(url: str) -> str:
    url = url.strip()
    if not url:
        raise BadSeed("empty URL")
    if any(ch.isspace() for ch in url):
        raise BadSeed("URL contains whitespace")
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises on a bad port
    except ValueError as exc:
        raise BadSeed(f"unparseable URL: {exc}") from None
    if parts.scheme not in ("http", "https"):
        raise BadSeed(f"scheme {parts.scheme or '(none)'!r} is not http or https")
    if not parts.hostname:
        raise BadSeed("URL has no host")
    return url


def parse_seed(raw: bytes | str, max_bytes: int = 8192) -> Seed:
    """Parse one entry of ``<spider>:start_urls``."""
    if isinstance(raw, str):
        raw = raw.encode("utf-8")
    if len(raw) > max_bytes:
        raise BadSeed(f"seed is {len(raw)} bytes, over the {max_bytes}-byte limit (SEED_MAX_BYTES)")
    try:
        text = raw.decode("utf-8").strip()
    except UnicodeDecodeError:
        raise BadSeed("seed is not UTF-8 text") from None
    if not text.startswith(("{", "[")):
        return Seed(url=check_url(text))
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise BadSeed(f"bad JSON: {exc}") from None
    if not isinstance(data, dict):
        raise BadSeed(f"JSON seed must be an object, got {type(data).__name__}")
    unknown = sorted(set(data) - set(JSON_SEED_KEYS))
    if unknown:
        raise BadSeed(f"unknown keys {unknown}; allowed: {sorted(JSON_SEED_KEYS)}")
    if "url" not in data and "sitemap" not in data:
        raise BadSeed("JSON seed has no 'url' (or 'sitemap')")
    if "url" in data and "sitemap" in data:
        raise BadSeed("JSON seed has both 'url' and 'sitemap': give one")
    for key, value in data.items():
        kind = JSON_SEED_KEYS[key]
        # bool is an int in Python; a priority of true is still a mistake
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise BadSeed(f"'{key}' must be a JSON {kind.__name__}, got {type(value).__name__}")
    own = sorted(key for key in data.get("meta", {}) if key.startswith(OWN_PREFIX))
    if own:  # (a seed's crawlhub_end would end it unfetched; its crawlhub_attempts would count failures it never had)
        raise BadSeed(f"meta keys {own} are crawlhub's own (its components set them), not a seed's")
    if "sitemap" in data:
        data["url"], data["sitemap"] = data.pop("sitemap"), True
    data["url"] = check_url(data["url"])
    if "method" in data:
        data["method"] = data["method"].upper()
        if not METHOD_TOKEN.fullmatch(data["method"]):  # (else the download fails, every retry, or sends it as is)
            raise BadSeed(f"'method' {data['method'][:40]!r} is not an HTTP method (a token such as GET or POST)")
    return Seed(**data)


def seed_callback(spider: Any, name: str) -> Callable[..., Any]:
    """The method a JSON seed's ``callback`` names: a public method defined on the spider's class (``spider``: the
    spider, or its class for the crawlhub command's check before a push). The frontier stores a callback by name,
    for any worker to run: a static or class method (``close``, ``from_crawler``), an attribute, a private name
    cannot be, and a seed naming one raises :class:`BadSeed` (it would otherwise stay in one worker's memory, and
    fail there)."""
    cls = spider if isinstance(spider, type) else type(spider)
    found = inspect.getattr_static(cls, name, None) if name.isidentifier() and not name.startswith("_") else None
    if not isinstance(found, types.FunctionType):
        raise BadSeed(f"callback {name!r} is not a method of spider {getattr(cls, 'name', cls.__name__)!r}")
    return getattr(spider, name)  # type: ignore[no-any-return]


# -- the seeds key in Redis: a list (LPUSH, crawlhub's and scrapy-redis' default), a set (SADD,
# scrapy-redis' REDIS_START_URLS_AS_SET) or a sorted set (ZADD, REDIS_START_URLS_AS_ZSET, highest score first).
# A worker reads whichever of the three the key is; any other type is refused for that spider alone.
SEED_KINDS = {"list": "LPUSH", "set": "SADD", "zset": "ZADD"}


class WrongSeedKey(ValueError):
    """The seeds key holds a Redis type seeds cannot be read from; the message names the key and the fix."""

    def __init__(self, key: str, kind: str) -> None:
        self.key, self.kind = key, kind
        super().__init__(f"seeds key {key} is a Redis {kind}, not a list, a set or a sorted set: nothing can be read "
                         f"from it (push seeds with `crawlhub seed` or redis-cli LPUSH / SADD / ZADD; `redis-cli del "
                         f"{key}` removes what is there)")


def _kind(server: redis.Redis, key: str) -> str:
    kind = server.type(key)
    return kind.decode() if isinstance(kind, bytes) else str(kind)


def _wrong_type(exc: Exception) -> bool:
    return str(exc).startswith("WRONGTYPE")


def pop_seeds(server: redis.Redis, key: str, count: int) -> list[bytes]:
    """Take up to ``count`` seeds off ``key``: the oldest first from a list, any from a set, the highest score first
    from a sorted set. Raises :class:`WrongSeedKey` for a key of another type."""
    import redis

    try:
        return server.rpop(key, count) or []  # type: ignore[return-value]  # (a count: a list of bytes)
    except redis.ResponseError as exc:
        if not _wrong_type(exc):
            raise
    kind = _kind(server, key)
    if kind == "set":
        return list(server.spop(key, count) or [])  # type: ignore[arg-type]
    if kind == "zset":
        popped: list[tuple[bytes, float]] = server.zpopmax(key, count)  # type: ignore[assignment]
        return [member for member, _ in popped]
    if kind == "list":  # it changed type between the two calls
        return server.rpop(key, count) or []  # type: ignore[return-value]
    raise WrongSeedKey(key, kind)


def count_seeds(server: redis.Redis, key: str) -> int:
    """The seeds waiting in ``key`` (:class:`WrongSeedKey` for a key of a type seeds cannot be read from): one
    round trip for a list (or no key), the usual case."""
    with server.pipeline(transaction=False) as pipe:
        pipe.type(key)
        pipe.llen(key)
        kind, length = pipe.execute(raise_on_error=False)
    kind = kind.decode() if isinstance(kind, bytes) else str(kind)
    if kind in ("none", "list") and not isinstance(length, Exception):
        return int(length)
    if kind == "set":
        return int(server.scard(key))
    if kind == "zset":
        return int(server.zcard(key))
    raise WrongSeedKey(key, kind)


def push_seeds(server: redis.Redis, key: str, raws: Sequence[str | bytes], as_set: bool = False, as_zset: bool = False) -> str:
    """Push ``raws`` to ``key`` the way the key holds seeds (a new key: a list, unless ``as_set`` /
    ``as_zset``, scrapy-redis' REDIS_START_URLS_AS_SET / _AS_ZSET, say otherwise); returns the command used."""
    kind = _kind(server, key)
    if kind == "none":
        kind = "zset" if as_zset else "set" if as_set else "list"
    if kind == "list":
        server.lpush(key, *raws)
    elif kind == "set":
        server.sadd(key, *raws)
    elif kind == "zset":
        server.zadd(key, dict.fromkeys(raws, 0))  # type: ignore[type-var]
    else:
        raise WrongSeedKey(key, kind)
    return SEED_KINDS[kind]
