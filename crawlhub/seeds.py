"""Seeds from ``<spider>:start_urls``: plain URLs or JSON objects.

``redis-cli lpush quotes:start_urls https://quotes.toscrape.com/`` or
``redis-cli lpush quotes:start_urls '{"url": "...", "meta": {...}, "priority": 5}'``.
A seed that is not one of those raises :class:`BadSeed` with the reason.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from urllib.parse import urlsplit

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


class BadSeed(ValueError):
    """A seed that cannot become a request; the message is the reason."""


@dataclass
class Seed:
    url: str
    meta: dict = field(default_factory=dict)
    priority: int = 0
    method: str = "GET"
    headers: dict = field(default_factory=dict)
    body: str = ""
    callback: str | None = None
    cb_kwargs: dict = field(default_factory=dict)
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
    if "sitemap" in data:
        data["url"], data["sitemap"] = data.pop("sitemap"), True
    data["url"] = check_url(data["url"])
    if "method" in data:
        data["method"] = data["method"].upper()
    return Seed(**data)
