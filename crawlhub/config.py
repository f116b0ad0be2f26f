"""Environment overrides for settings, and helpers to keep secrets out of logs.

Every setting defined in :mod:`crawlhub.default_settings` can be overridden by an
environment variable of the same name. Values are coerced to the type of the
default (bool, int, float, list, dict); strings stay strings.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, MutableMapping
from typing import Any
from urllib.parse import urlsplit, urlunsplit

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


class SettingError(ValueError):
    """An environment variable could not be read as the setting's type."""


def coerce(name: str, raw: str, default: Any) -> Any:
    """Turn the environment string ``raw`` into the type of ``default``."""
    try:
        if isinstance(default, bool):
            low = raw.strip().lower()
            if low in _TRUE:
                return True
            if low in _FALSE:
                return False
            raise ValueError(f"expected one of {sorted(_TRUE | _FALSE)}")
        if isinstance(default, int):
            return int(raw)
        if isinstance(default, float):
            return float(raw)
        if isinstance(default, (list, tuple)):
            raw = raw.strip()
            if raw.startswith("["):
                return json.loads(raw)
            return [part.strip() for part in raw.split(",") if part.strip()]
        if isinstance(default, dict):
            if not raw.strip():  # set but empty (e.g. an unset variable passed on by Compose): none
                return {}
            value = json.loads(raw)
            if not isinstance(value, dict):
                raise ValueError("expected a JSON object")
            return value
    except ValueError as exc:
        raise SettingError(f"environment variable {name}={raw!r}: {exc}") from None
    return raw


def apply_env_overrides(namespace: MutableMapping[str, Any], environ: Mapping[str, str] | None = None) -> list[str]:
    """Override upper-case names in ``namespace`` from ``environ``.

    Returns the names that were overridden (for logging; values are not
    returned because some are secrets).
    """
    environ = os.environ if environ is None else environ
    changed = []
    for name in [n for n in namespace if n.isupper() and not n.startswith("_")]:
        if name in environ:
            namespace[name] = coerce(name, environ[name], namespace[name])
            changed.append(name)
    return changed


def redact_url(url: str | None) -> str:
    """``redis://user:secret@host:6379/0`` -> ``redis://user:***@host:6379/0``."""
    if not url:
        return str(url)
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return "<unparseable url>"
    if parts.password is None and not (parts.username and "@" in parts.netloc):
        return url
    host = parts.hostname or ""
    if port:
        host = f"{host}:{port}"
    user = parts.username or ""
    netloc = f"{user}:***@{host}" if parts.password is not None else f"***@{host}"
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


# The ranges of crawlhub's numeric settings (and the few of Scrapy's that crawlhub reads) outside which a worker would
# fail later with a traceback, or crawl wrongly without a word: a LEASE_TTL of 0 divides by zero in the reclaim, a
# FRONTIER_PARTITIONS of 0 fails the scheduler's open, a CONCURRENT_REQUESTS of 0 (no limit, to Scrapy's downloader)
# leases one request a round (the frontier leases the downloader's free slots). name: (lowest, lowest allowed?,
# highest or None, highest allowed?); an integer setting (its default an int) must be a whole number.
_AT_LEAST_1 = (1, True, None, True)
_POSITIVE = (0, False, None, True)
_NOT_NEGATIVE = (0, True, None, True)
_SHARE = (0, True, 1, True)
_PORT = (0, True, 65535, True)
BOUNDS: dict[str, tuple[float, bool, float | None, bool]] = {
    **dict.fromkeys(
        ("FRONTIER_PARTITIONS", "CONCURRENT_REQUESTS", "FRONTIER_LEASE_BATCH", "FRONTIER_LINK_BATCH",
         "FRONTIER_DOMAINS_PER_LEASE", "FRONTIER_PARTITIONS_PER_LEASE", "DUPEFILTER_BUCKETS", "DUPEFILTER_BLOOM_CAPACITY",
         "DOMAIN_BURST", "MONGO_BATCH_SIZE", "MONGO_BUFFER_MAX", "BROWSER_MAX_CONTEXTS", "BROWSER_MAX_PAGES_PER_CONTEXT",
         "LEASE_MAX_EXPIRIES", "REFRESH_BATCH", "SEED_MAX_BYTES", "DOMAIN_BACKOFF_MAX_FACTOR"), _AT_LEAST_1),
    **dict.fromkeys(
        ("LEASE_TTL", "WORKER_HEARTBEAT_INTERVAL", "LEASE_MAINTENANCE_INTERVAL", "LEASE_RECLAIM_INTERVAL",
         "CLUSTER_STATS_INTERVAL", "QUALITY_FLUSH_INTERVAL", "MONGO_FLUSH_INTERVAL", "REFRESH_INTERVAL",
         "QUALITY_CHECK_INTERVAL", "REFRESH_LOCK_TTL", "BROWSER_TIMEOUT", "BROWSER_LAUNCH_TIMEOUT",
         "DOMAIN_BACKOFF_BASE"), _POSITIVE),
    **dict.fromkeys(
        ("RETRY_TIMES", "CRAWL_BUDGET", "DEPTH_LIMIT", "DOMAIN_CONCURRENCY", "MAX_IDLE_TIME_BEFORE_CLOSE",
         "FRONTIER_POLL_INTERVAL", "FRONTIER_IDLE_POLL_MAX", "DOWNLOAD_DELAY", "DOWNLOAD_MAXSIZE", "REDIS_RETRIES",
         "REDIS_STARTUP_WAIT", "MONGO_STARTUP_WAIT", "FRONTIER_LEASE_LINGER", "FRONTIER_LINK_HOLD",
         "FRONTIER_LOCAL_FILTER_SIZE", "WORKER_DEAD_AFTER", "RETRY_BACKOFF_BASE", "RETRY_BACKOFF_MAX",
         "FRONTIER_LEASES_PER_PARTITION", "SEED_BATCH_SIZE", "FRONTIER_LEASE_MIN", "BAD_SEEDS_MAX",
         "FRONTIER_BAD_REQUESTS_MAX"), _NOT_NEGATIVE),
    "FRONTIER_LEASE_AHEAD": (-1, True, None, True),  # -1 = CONCURRENT_REQUESTS
    "DUPEFILTER_BLOOM_ERROR_RATE": (0, False, 1, False),
    "DOMAIN_RECOVERY": (0, False, 1, True),
    "QUALITY_PAGE_MIN_SHARE": _SHARE,
    "BROWSER_MARK_RATIO": _SHARE,
    **dict.fromkeys(("METRICS_PORT", "EMBEDDED_REDIS_PORT", "EMBEDDED_MONGO_PORT"), _PORT),
}


def _range_text(low: float, low_in: bool, high: float | None, high_in: bool) -> str:
    def num(x: float) -> str:
        return f"{x:g}"

    if high is None:
        return f"{num(low)} or more" if low_in else f"more than {num(low)}"
    if low_in and high_in:
        return f"from {num(low)} to {num(high)}"
    return f"more than {num(low)} and {'at most' if high_in else 'less than'} {num(high)}"


def check_settings(settings: Any) -> list[str]:
    """What is wrong with the numeric settings in ``settings`` (a Scrapy Settings): one line a setting, naming it,
    its value and where the value came from (the environment, or a setting); empty when nothing is."""
    from crawlhub import default_settings

    from_env = set(settings.getlist("CRAWLHUB_ENV_OVERRIDES"))
    problems = []
    for name, (low, low_in, high, high_in) in BOUNDS.items():
        raw = settings.get(name)
        if raw is None or isinstance(raw, bool):
            continue
        where = f"environment variable {name}={raw!r}" if name in from_env else f"setting {name} = {raw!r}"
        whole = isinstance(getattr(default_settings, name, None), int)
        try:
            value = float(raw)
        except (TypeError, ValueError):
            problems.append(f"{where}: not a number")
            continue
        if whole and not value.is_integer():
            problems.append(f"{where}: must be a whole number")
        elif not ((value >= low if low_in else value > low)
                  and (high is None or (value <= high if high_in else value < high))):
            problems.append(f"{where}: must be {_range_text(low, low_in, high, high_in)}")
    if not problems:
        # a lease is renewed every LEASE_TTL / 3, looked at every LEASE_MAINTENANCE_INTERVAL: it could expire between
        # two looks, and another worker's reclaim would queue its page again while it downloads (fetched twice)
        ttl, every = settings.getfloat("LEASE_TTL"), settings.getfloat("LEASE_MAINTENANCE_INTERVAL")
        if ttl < 2 * every:
            problems.append(f"LEASE_TTL ({ttl:g}) must be at least twice LEASE_MAINTENANCE_INTERVAL ({every:g}): a lease "
                            "could expire before its worker renews it, and its page be fetched again by another")
    return problems
