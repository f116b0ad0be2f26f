"""Every setting crawlhub reads, checked before anything starts.

``scrapy crawl`` (crawlhub.commands.crawl, before Redis is reached or an embedded server started), a crawler the
add-on builds (crawlhub.addon) and every ``crawlhub`` command that loads the settings (crawlhub.cli._common) call
:func:`check_settings`: a value its setting does not accept is one line naming the setting, where the value came
from (an environment variable or a setting), the value (a secret's without its password: a URL redacted, proxies
and webhooks not shown) and what the setting accepts; the command exits 2.

:data:`RULES` says how each setting is checked, in this one place. A setting's kind follows from its default's type
(a boolean; a number within its range of :data:`BOUNDS`, whole unless the code reads it as a float), or is given in
:data:`KINDS`: a rate or a duration (read by the parsers of the code that reads them), a choice among the values of
the code that reads it (its own constant), a JSON map, a list of HTTP status codes, a URL, a class path...
tests/unit/test_settings_check.py fails when a setting of crawlhub.default_settings has no rule.
"""

from __future__ import annotations

import codecs
import ipaddress
import logging
import re
import typing
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from scrapy.settings import SETTINGS_PRIORITIES, BaseSettings
from scrapy.utils.misc import load_object

from crawlhub import default_settings
from crawlhub.config import redact_url
from crawlhub.connection import cluster_nodes
from crawlhub.downloadermiddlewares.proxy import ROTATIONS
from crawlhub.extensions.webhook import FORMATS, SCHEMES
from crawlhub.frontier.dupefilter import MODES
from crawlhub.frontier.politeness import parse_limit, parse_rate
from crawlhub.pipelines.validate import ISO4217
from crawlhub.profiles import FAMILIES, OSES, POLICIES, ProfileError, load_profiles
from crawlhub.proxies import parse_pools
from crawlhub.revisit.policy import parse_duration
from crawlhub.roles import declared

# A check reads the setting ``name`` of ``settings`` as the code does, and raises ValueError (or TypeError) saying
# what the setting accepts when the value is not one of those.
Check = Callable[[BaseSettings, str], None]


@dataclass(frozen=True)
class Kind:
    check: Check
    what: str  # the kind's name: number, boolean, rate, duration, map, choice, status codes, url...
    # how a line shows the value: a secret's without its password, or not at all (None)
    shown: Callable[[Any], str | None] = repr
    # the check imports what the value names (a class, a driver's URL parser, curl_cffi): skipped by the crawlhub
    # command, which loads neither (a worker does, and its start-up checks do)
    imports: bool = False


# --- numbers -------------------------------------------------------------------------------------------------------
# The ranges of the numeric settings (crawlhub's, and the few of Scrapy's crawlhub reads) outside which a worker would
# fail later with a traceback, or crawl wrongly without a word: a LEASE_TTL of 0 divides by zero in the reclaim, a
# FRONTIER_PARTITIONS of 0 fails the scheduler's open, a CONCURRENT_REQUESTS of 0 (no limit, to Scrapy's downloader)
# leases one request a round (the frontier leases the downloader's free slots). name: (lowest, lowest allowed?,
# highest or None, highest allowed?). Every numeric setting has one (a test says so).
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
         "LEASE_MAX_EXPIRIES", "REFRESH_BATCH", "SEED_MAX_BYTES", "DOMAIN_BACKOFF_MAX_FACTOR",
         "CONCURRENT_REQUESTS_PER_DOMAIN", "ROBOTSTXT_MAX_BYTES", "FRONTIER_REPLICA_WAIT_TIMEOUT", "AUDIT_LOG_MAXLEN",
         "SESSION_POOL_SIZE", "SESSION_LOGIN_FAILURES", "LADDER_CLIMB_AFTER", "PROXY_BAN_AFTER", "PROXY_DEAD_AFTER",
         "PROXY_ESCALATE_AFTER", "PROXY_TIER_TTL", "MONGO_SERVER_SELECTION_TIMEOUT_MS"), _AT_LEAST_1),
    **dict.fromkeys(
        ("LEASE_TTL", "WORKER_HEARTBEAT_INTERVAL", "LEASE_MAINTENANCE_INTERVAL", "LEASE_RECLAIM_INTERVAL",
         "CLUSTER_STATS_INTERVAL", "QUALITY_FLUSH_INTERVAL", "MONGO_FLUSH_INTERVAL", "REFRESH_INTERVAL",
         "QUALITY_CHECK_INTERVAL", "REFRESH_LOCK_TTL", "BROWSER_TIMEOUT", "BROWSER_LAUNCH_TIMEOUT",
         "DOMAIN_BACKOFF_BASE", "DOWNLOAD_TIMEOUT", "FRONTIER_PARTITION_RECHECK", "LADDER_PROBE_AFTER",
         "LADDER_PROBE_MAX", "MONGO_CLOSE_TIMEOUT", "QUALITY_CYCLE", "QUALITY_RETENTION", "QUALITY_WINDOW",
         "QUALITY_WEBHOOK_TIMEOUT", "REVISIT_REQUEUE_AFTER", "ROBOTSTXT_TIMEOUT", "ROBOTSTXT_TTL",
         "SESSION_LOGIN_TIMEOUT", "CLUSTER_STATS_RETENTION"), _POSITIVE),
    **dict.fromkeys(
        ("RETRY_TIMES", "CRAWL_BUDGET", "DEPTH_LIMIT", "DOMAIN_CONCURRENCY", "MAX_IDLE_TIME_BEFORE_CLOSE",
         "FRONTIER_POLL_INTERVAL", "FRONTIER_IDLE_POLL_MAX", "DOWNLOAD_DELAY", "DOWNLOAD_MAXSIZE", "REDIS_RETRIES",
         "REDIS_STARTUP_WAIT", "MONGO_STARTUP_WAIT", "FRONTIER_LEASE_LINGER", "FRONTIER_LINK_HOLD",
         "FRONTIER_LOCAL_FILTER_SIZE", "WORKER_DEAD_AFTER", "RETRY_BACKOFF_BASE", "RETRY_BACKOFF_MAX",
         "FRONTIER_LEASES_PER_PARTITION", "SEED_BATCH_SIZE", "FRONTIER_LEASE_MIN", "BAD_SEEDS_MAX",
         "FRONTIER_BAD_REQUESTS_MAX", "DOWNLOAD_WARNSIZE", "GENERIC_DEPTH_LIMIT", "ITEM_FIELD_MAX_CHARS",
         "FRONTIER_REPLICA_WAIT", "BROWSER_MARK_MIN_FALLBACKS", "BROWSER_DOMAINS_REFRESH", "DEDUPE_PAGES",
         "LADDER_REFRESH", "MONGO_CLOSE_RETRIES", "PROXY_COOLDOWN", "PROXY_COOLDOWN_MAX", "PROXY_MAX_SWITCHES",
         "PROXY_STATE_REFRESH", "QUALITY_BROKEN_MAX", "QUALITY_MIN_ITEMS", "QUALITY_MIN_PAGES",
         "QUALITY_WEBHOOK_RETRIES", "REVISIT_INC_RATE", "ROBOTSTXT_ERROR_RETRY", "ROBOTSTXT_UNREACHABLE_RETRY",
         "ROBOTSTXT_UNAVAILABLE_MAX_WAITS", "SESSION_MAX_AGE", "SESSION_MAX_USES", "SESSION_MAX_RELOGINS",
         "SESSION_REFRESH", "STATUS_DONE_AFTER"), _NOT_NEGATIVE),
    "FRONTIER_LEASE_AHEAD": (-1, True, None, True),  # -1 = CONCURRENT_REQUESTS
    "DUPEFILTER_BLOOM_ERROR_RATE": (0, False, 1, False),
    "DOMAIN_RECOVERY": (0, False, 1, True),
    **dict.fromkeys(("QUALITY_PAGE_MIN_SHARE", "BROWSER_MARK_RATIO", "QUALITY_COVERAGE_MARGIN", "QUALITY_DLQ_MAX",
                     "QUALITY_QUARANTINE_MAX", "REVISIT_DEC_RATE"), _SHARE),
    "QUALITY_SCORE_MIN": (0, True, 100, True),
    **dict.fromkeys(("METRICS_PORT", "EMBEDDED_REDIS_PORT", "EMBEDDED_MONGO_PORT"), _PORT),
}
# Whole numbers: the settings whose default is an int, but these, which the code reads as floats (getfloat)
FRACTIONS = frozenset({"CLUSTER_STATS_RETENTION", "DOWNLOAD_TIMEOUT", "MAX_IDLE_TIME_BEFORE_CLOSE",
                       "REVISIT_REQUEUE_AFTER", "ROBOTSTXT_ERROR_RETRY", "ROBOTSTXT_TIMEOUT", "ROBOTSTXT_TTL",
                       "ROBOTSTXT_UNREACHABLE_RETRY"})


def range_text(low: float, low_in: bool, high: float | None, high_in: bool) -> str:
    def num(x: float) -> str:
        return f"{x:g}"

    if high is None:
        return f"{num(low)} or more" if low_in else f"more than {num(low)}"
    if low_in and high_in:
        return f"from {num(low)} to {num(high)}"
    return f"more than {num(low)} and {'at most' if high_in else 'less than'} {num(high)}"


def number(low: float, low_in: bool, high: float | None, high_in: bool, whole: bool) -> Kind:
    def check(settings: BaseSettings, name: str) -> None:
        raw = settings.get(name)
        if isinstance(raw, bool):  # (True is 1 to Scrapy's getint)
            return
        wanted = range_text(low, low_in, high, high_in)
        try:
            value = float(raw)
        except (TypeError, ValueError):
            raise ValueError(f"not a number (it must be {'a whole number, ' if whole else ''}{wanted})") from None
        if whole and not (value.is_integer() and _int_reads(raw)):
            raise ValueError(f"must be a whole number, {wanted}")
        if not ((value >= low if low_in else value > low)
                and (high is None or (value <= high if high_in else value < high))):
            raise ValueError(f"must be {wanted}")

    return Kind(check, "number")


def _int_reads(raw: Any) -> bool:
    """Scrapy's getint reads it (int("2.0") fails where float("2.0") does not)."""
    try:
        int(raw)
    except (TypeError, ValueError, OverflowError):
        return False
    return True


# --- the other kinds -----------------------------------------------------------------------------------------------
def _bool(settings: BaseSettings, name: str) -> None:
    try:
        settings.getbool(name)
    except ValueError:
        raise ValueError("must be true or false (True, False, 1 or 0; in the environment also yes/no, on/off)") from None


BOOL = Kind(_bool, "boolean")


def choice(options: tuple[str, ...] | list[str], empty: bool = False) -> Kind:
    """One of ``options`` (the constant of the code that reads it); ``empty``: "" too (the code's default)."""

    def check(settings: BaseSettings, name: str) -> None:
        value = settings.get(name)
        if not (value in options or (empty and value == "")):
            raise ValueError(f"must be one of {', '.join(options)}")

    return Kind(check, "choice")


def choices(options: tuple[str, ...]) -> Kind:
    """A list (JSON or comma-separated) of some of ``options`` (case ignored); empty = all."""

    def check(settings: BaseSettings, name: str) -> None:
        unknown = sorted({str(v) for v in settings.getlist(name) if str(v).strip().lower() not in options})
        if unknown:
            raise ValueError(f"unknown {', '.join(unknown)}: a list of some of {', '.join(options)} (empty = all)")

    return Kind(check, "choices")


def _log_level(settings: BaseSettings, name: str) -> None:
    value = settings.get(name)
    levels = logging.getLevelNamesMapping()  # what logging's setLevel takes (Scrapy hands it LOG_LEVEL)
    if not (value in levels or (isinstance(value, int) and not isinstance(value, bool))):
        raise ValueError(f"must be one of {', '.join(n for n in levels if n not in ('WARN', 'FATAL', 'NOTSET'))}")


def _rate(settings: BaseSettings, name: str) -> None:
    parse_rate(settings.get(name))  # BadLimit, a ValueError, says what it accepts


def _duration(zero: bool) -> Kind:
    """A duration as the revisit policy reads it (90, "90s", "15m", "6h", "1d", "2w"); ``zero``: 0 too (none)."""

    def check(settings: BaseSettings, name: str) -> None:
        value = settings.get(name)
        if zero and value in (0, "0", ""):
            return
        try:
            parse_duration(value)
        except ValueError as exc:
            raise ValueError(f"{exc}{' (or 0: none)' if zero else ''}") from None

    return Kind(check, "duration")


def _status_codes(settings: BaseSettings, name: str) -> None:
    bad = []
    for code in settings.getlist(name):
        try:
            if isinstance(code, bool) or not 100 <= int(code) <= 599:
                bad.append(code)
        except (TypeError, ValueError):
            bad.append(code)
    if bad:
        raise ValueError(f"{', '.join(map(repr, bad))}: a list of HTTP status codes (100 to 599), "
                         "JSON or comma-separated")


def _texts(settings: BaseSettings, name: str) -> None:
    if any(not isinstance(v, str) for v in settings.getlist(name)):
        raise ValueError("must be a list of texts (JSON, or comma-separated)")


def _text(settings: BaseSettings, name: str) -> None:
    if not isinstance(settings.get(name), str):
        raise ValueError("must be a text")


def _name(settings: BaseSettings, name: str) -> None:
    """A MongoDB database or collection name."""
    value = settings.get(name)
    if not isinstance(value, str) or not value or any(c in value for c in '/\\. "$\0'):
        raise ValueError("must be a MongoDB name: not empty, without / \\ . \" $ or spaces")


def _collection(empty: bool) -> Kind:
    def check(settings: BaseSettings, name: str) -> None:
        value = settings.get(name)
        if not isinstance(value, str) or (not value and not empty) or "$" in value or "\0" in value \
                or value.startswith(("system.", ".")) or value.endswith("."):
            raise ValueError(f"must be a MongoDB collection name{' (or empty: none)' if empty else ''}: "
                             "no $, not starting with system.")

    return Kind(check, "name")


def _key_template(field: str) -> Kind:
    """A Redis key with ``%(field)s`` in it (the spider's name)."""

    def check(settings: BaseSettings, name: str) -> None:
        try:
            key = str(settings.get(name)) % {field: "spider"}
        except (KeyError, ValueError, TypeError) as exc:
            raise ValueError(f"must be a key with %({field})s in it ({type(exc).__name__}: {exc})") from None
        if not key:
            raise ValueError(f"must be a key with %({field})s in it")

    return Kind(check, "key")


def _encoding(settings: BaseSettings, name: str) -> None:
    try:
        codecs.lookup(str(settings.get(name)))
    except LookupError:
        raise ValueError("must be a text encoding Python knows (utf-8, latin-1...)") from None


def _currency(settings: BaseSettings, name: str) -> None:
    value = settings.get(name)
    if value and not (isinstance(value, str) and ISO4217.fullmatch(value)):
        raise ValueError("must be an ISO 4217 currency code (EUR, USD, GBP...) or empty")


def _address(settings: BaseSettings, name: str) -> None:
    value = str(settings.get(name))
    try:
        ipaddress.ip_address(value)
    except ValueError:
        if not re.fullmatch(r"[A-Za-z0-9]([A-Za-z0-9.-]{0,252})", value):
            raise ValueError("must be an address to listen on (0.0.0.0, 127.0.0.1, ::, a host name)") from None


def _object(value: Any) -> None:
    if not isinstance(value, str):
        return  # a class itself
    if not re.fullmatch(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)+", value):
        raise ValueError("must be a dotted path to a class (package.module.Class)")
    try:
        load_object(value)
    except (ImportError, AttributeError, NameError, ValueError) as exc:
        raise ValueError(f"cannot be imported ({type(exc).__name__}: {exc})") from None


def _object_path(settings: BaseSettings, name: str) -> None:
    _object(settings.get(name))


def _named_object(path: Any) -> None:
    """:func:`_object`, its error naming the path (one of several)."""
    try:
        _object(path)
    except ValueError as exc:
        raise ValueError(f"{path!r} {exc}") from None


def _object_paths(settings: BaseSettings, name: str) -> None:
    for value in settings.getlist(name):
        _named_object(value)


def _components(settings: BaseSettings, name: str) -> None:
    """Scrapy's components dict: {"package.module.Class": order or None}."""
    for path, order in settings.getdict(name).items():
        if order is not None and (isinstance(order, bool) or not isinstance(order, (int, float))):
            raise ValueError(f"{path!r}: its order must be a number, or None to turn it off")
        if order is not None:
            _named_object(path)


def _domain_limits(settings: BaseSettings, name: str) -> None:
    for domain, limit in settings.getdict(name).items():
        try:
            parse_limit(limit)
        except (ValueError, TypeError) as exc:  # (a concurrency that is not a number: int()'s ValueError)
            raise ValueError(f"{domain!r}: {exc} (each domain's value: a rate such as \"2/s\", or "
                             '{"rate": "2/s", "concurrency": 4})') from None


def _proxy_pools(settings: BaseSettings, name: str) -> None:
    parse_pools(settings.getdict(name))  # ProxyConfigError (a ValueError) says where, never the credentials


def _proxy_file(settings: BaseSettings, name: str) -> None:
    if settings.get(name):
        parse_pools(None, settings.get(name))


def _profiles_file(settings: BaseSettings, name: str) -> None:
    if settings.get(name):
        try:
            load_profiles(settings.get(name))
        except ProfileError as exc:
            raise ValueError(f"{exc} (`crawlhub profiles check FILE` says what is wrong)") from None


def _redis_params(settings: BaseSettings, name: str) -> None:
    import inspect

    import redis
    from redis.cluster import RedisCluster

    params = settings.getdict(name)
    try:
        cluster = cluster_nodes(settings) is not None
    except ValueError:
        cluster = False  # (said of REDIS_URL or REDIS_CLUSTER_NODES)
    if cluster:  # a cluster client's own options too: they go to RedisCluster
        own = set(inspect.signature(RedisCluster.__init__).parameters) - set(inspect.signature(redis.Redis).parameters)
        params = {key: value for key, value in params.items() if key not in own}
    try:
        redis.Redis(**params).close()  # (a client makes no connection before its first command)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"redis-py refuses them: {exc} (a JSON object of redis.Redis' options)") from None


def _redis_url(settings: BaseSettings, name: str) -> None:
    from redis.connection import parse_url

    url = settings.get(name)
    if not url:
        return  # the embedded server
    try:
        if cluster_nodes(BaseSettings({name: url})) is None:
            parse_url(url)  # type: ignore[no-untyped-call]
    except ValueError as exc:
        raise ValueError(f"is not a Redis URL: {exc} (redis://[:PASSWORD@]host:6379/0, rediss:// for TLS, "
                         "unix:///path/redis.sock, redis+cluster://host:port,host:port)") from None


def _cluster_nodes(settings: BaseSettings, name: str) -> None:
    if settings.get(name):
        cluster_nodes(BaseSettings({name: settings.get(name)}))  # ValueError: "REDIS_CLUSTER_NODES: 'x' is not ..."


def _mongo_uri(settings: BaseSettings, name: str) -> None:
    uri = settings.get(name)
    if not uri:
        return  # the embedded server
    from pymongo.errors import PyMongoError
    from pymongo.uri_parser import SCHEME, SRV_SCHEME, parse_uri

    if str(uri).startswith(SRV_SCHEME):
        return  # (its hosts are looked up in DNS: connecting says what is wrong)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # an unknown option only warns, as MongoClient takes it
            parse_uri(uri, warn=True)
    except (PyMongoError, ValueError) as exc:
        raise ValueError(f"is not a MongoDB URI: {str(exc).splitlines()[0][:200]} ({SCHEME}host:27017/ or "
                         f"{SRV_SCHEME}host/; a password with @ : / % percent-encoded)") from None


def _webhook_url(settings: BaseSettings, name: str) -> None:
    url = settings.get(name)
    if not url:
        return  # off
    try:
        parts = urlsplit(str(url))
        parts.port  # noqa: B018 - a bad port raises here
    except ValueError:
        parts = None
    if parts is None or parts.scheme not in SCHEMES or not parts.hostname:
        raise ValueError(f"must be an {'/'.join(SCHEMES)} URL with a host, or empty (off)")


def _impersonate_targets() -> frozenset[str]:
    """curl_cffi's targets (its BrowserType names and the aliases it resolves); empty when it is not installed."""
    try:
        from curl_cffi.requests.impersonate import REAL_TARGET_MAP, BrowserTypeLiteral
    except ImportError:
        return frozenset()
    return frozenset(typing.get_args(BrowserTypeLiteral)) | frozenset(REAL_TARGET_MAP)


def _impersonate_target(settings: BaseSettings, name: str) -> None:
    value = settings.get(name)
    if value == getattr(default_settings, name) or value == "":
        return  # ("" is the default too; the default needs no import of curl_cffi, which a worker loads on first use)
    known = _impersonate_targets()
    if known and value not in known:
        raise ValueError(f"must be a curl_cffi target: {', '.join(sorted(known))}")


def _impersonate_targets_map(settings: BaseSettings, name: str) -> None:
    value = settings.getdict(name)
    unknown = sorted(set(value) - set(FAMILIES))
    if unknown:
        raise ValueError(f"its keys are browser families ({', '.join(FAMILIES)}), not {', '.join(unknown)}")
    if value == getattr(default_settings, name):
        return
    known = _impersonate_targets()
    bad = sorted(str(t) for t in value.values() if known and t not in known)
    if bad:
        raise ValueError(f"{', '.join(bad)}: each family's target must be a curl_cffi target: {', '.join(sorted(known))}")


def _capabilities(settings: BaseSettings, name: str) -> None:
    declared(settings)  # ValueError naming the rungs


def _internal(settings: BaseSettings, name: str) -> None:
    """Set by crawlhub itself."""


def _hidden(value: Any) -> str | None:
    return None


def _redacted(value: Any) -> str:
    return repr(redact_url(str(value)))


def _host_only(value: Any) -> str:
    try:
        host = urlsplit(str(value)).hostname
    except ValueError:
        host = None
    return f"(a URL to {host})" if host else "(not shown: a secret)"


def _keys_only(value: Any) -> str:
    return f"(options {', '.join(sorted(map(str, value)))})" if isinstance(value, dict) else "(not shown)"


TEXTS = Kind(_texts, "texts")
TEXT = Kind(_text, "text")
CODES = Kind(_status_codes, "status codes")
OBJECT = Kind(_object_path, "class", imports=True)
OBJECTS = Kind(_object_paths, "classes", imports=True)
COMPONENTS = Kind(_components, "components", imports=True)

# The settings whose kind does not follow from their default's type (or whose value the type says too little of).
KINDS: dict[str, Kind] = {
    # services
    "REDIS_URL": Kind(_redis_url, "url", shown=_redacted),
    "REDIS_CLUSTER_NODES": Kind(_cluster_nodes, "addresses"),
    "REDIS_PARAMS": Kind(_redis_params, "map", shown=_keys_only),
    "MONGO_URI": Kind(_mongo_uri, "url", shown=_redacted, imports=True),
    "MONGO_DATABASE": Kind(_name, "name"),
    "CRAWLHUB_HOME": TEXT,
    # frontier
    "SCHEDULER": OBJECT,
    "DUPEFILTER_CLASS": OBJECT,
    "REQUEST_FINGERPRINTER_CLASS": OBJECT,
    "URL_TRACKING_PARAMS": TEXTS,
    "SCHEDULER_QUEUE_KEY": _key_template("spider"),
    "SCHEDULER_DUPEFILTER_KEY": _key_template("spider"),
    "REDIS_START_URLS_KEY": _key_template("name"),
    "FRONTIER_REQUEST_CLASSES": OBJECTS,
    "DUPEFILTER_MODE": choice(MODES),
    # politeness
    "DOMAIN_RATE": Kind(_rate, "rate"),
    "DOMAIN_LIMITS": Kind(_domain_limits, "map"),
    "DOMAIN_SLOWDOWN_CODES": CODES,
    # retries
    "RETRY_HTTP_CODES": CODES,
    "HTTP_GONE_CODES": CODES,
    # quality
    "QUALITY_WEBHOOK_URL": Kind(_webhook_url, "url", shown=_host_only),
    "QUALITY_WEBHOOK_FORMAT": choice(FORMATS),
    # workers, metrics
    "METRICS_ADDRESS": Kind(_address, "address"),
    "EXTENSIONS": COMPONENTS,
    "DOWNLOADER_MIDDLEWARES": COMPONENTS,
    "SPIDER_MIDDLEWARES": COMPONENTS,
    "ITEM_PIPELINES": COMPONENTS,
    "WORKER_CAPABILITIES": Kind(_capabilities, "choices"),
    # crawling
    "USER_AGENT": TEXT,
    "ROBOTSTXT_USER_AGENT": TEXT,
    "TWISTED_REACTOR": OBJECT,
    "FEED_EXPORT_ENCODING": Kind(_encoding, "encoding"),
    "LOG_LEVEL": Kind(_log_level, "choice"),
    "LOG_FORMATTER": OBJECT,
    # browser, ladder, sessions
    "CHROMIUM_PATH": TEXT,
    "BROWSER_ABORT_RESOURCES": TEXTS,
    "IMPERSONATE_TARGET": Kind(_impersonate_target, "choice", imports=True),
    "IMPERSONATE_TARGETS": Kind(_impersonate_targets_map, "map", imports=True),
    "LADDER_BLOCK_CODES": CODES,
    "SESSION_BAN_CODES": CODES,
    # header profiles
    "HEADER_PROFILES_POLICY": choice(POLICIES, empty=True),
    "HEADER_PROFILES_FAMILIES": choices(FAMILIES),
    "HEADER_PROFILES_OS": choices(OSES),
    "HEADER_PROFILES_PIN": TEXT,  # (a profile id of HEADER_PROFILES_FILE: checked with it, below)
    "HEADER_PROFILES_FILE": Kind(_profiles_file, "file"),
    # proxies
    "PROXY_POOLS": Kind(_proxy_pools, "map", shown=_hidden),
    "PROXY_FILE": Kind(_proxy_file, "file"),
    "PROXY_TIERS": TEXTS,  # (pools of PROXY_POOLS / PROXY_FILE: checked with them, below)
    "PROXY_ROTATION": choice(ROTATIONS, empty=True),
    "PROXY_BAN_CODES": CODES,
    "PROXY_BAN_MARKERS": TEXTS,
    # items
    "DEFAULT_CURRENCY": Kind(_currency, "currency"),
    "MONGO_QUARANTINE_COLLECTION": _collection(empty=False),
    # continuous crawling
    "STATUS_COLLECTION": _collection(empty=False),
    "CHANGES_COLLECTION": _collection(empty=True),
    "REVISIT_MIN_INTERVAL": _duration(zero=False),
    "REVISIT_MAX_INTERVAL": _duration(zero=False),
    "REVISIT_GONE_DELAY": _duration(zero=True),
    # set by crawlhub
    "CRAWLHUB_ENV_OVERRIDES": Kind(_internal, "internal"),
    # Scrapy's settings crawlhub reads that crawlhub does not set (crawlhub.downloadermiddlewares.retry, .proxy)
    "HTTPERROR_ALLOWED_CODES": CODES,
    "HTTPERROR_ALLOW_ALL": BOOL,
    "RETRY_ENABLED": BOOL,
    "RETRY_EXCEPTIONS": OBJECTS,
}
# Of those, Scrapy's own (not in crawlhub.default_settings)
SCRAPY_READ = ("HTTPERROR_ALLOWED_CODES", "HTTPERROR_ALLOW_ALL", "RETRY_ENABLED", "RETRY_EXCEPTIONS")


def _derived(name: str, default: Any) -> Kind | None:
    """The kind a setting's default says: a boolean, or a number in its range (None: no rule)."""
    if isinstance(default, bool):
        return BOOL
    if isinstance(default, (int, float)) and name in BOUNDS:
        return number(*BOUNDS[name], whole=isinstance(default, int) and name not in FRACTIONS)
    return None


def rules() -> dict[str, Kind | None]:
    """Every setting crawlhub reads (crawlhub.default_settings' and :data:`SCRAPY_READ`) -> how it is checked;
    None: no rule (tests/unit/test_settings_check.py fails on it)."""
    names = [name for name in dir(default_settings) if name.isupper()]
    return {**{name: KINDS.get(name) or _derived(name, getattr(default_settings, name)) for name in names},
            **{name: KINDS[name] for name in SCRAPY_READ}}


RULES = rules()


def _where(settings: BaseSettings, name: str, kind: Kind, from_env: set[str]) -> str:
    shown = kind.shown(settings.get(name))
    if shown is not None and len(shown) > 200:
        shown = shown[:200] + "..."
    # (the add-on sets the environment's values at the project's priority: a spider's or -s' own win over them)
    if name in from_env and (settings.getpriority(name) or 0) <= SETTINGS_PRIORITIES["project"]:
        return f"environment variable {name}" + (f"={shown}" if shown is not None else "")
    return f"setting {name}" + (f" = {shown}" if shown is not None else "")


def check_settings(settings: BaseSettings, imports: bool = True) -> list[str]:
    """What is wrong with ``settings`` (a Scrapy Settings with crawlhub's installed): one line a setting, naming it,
    its value and where the value came from (the environment, or a setting), and what it accepts; empty when
    nothing is. ``imports``: also the checks that import what the settings name (their classes, MongoDB's driver,
    curl_cffi), which the crawlhub command does not load."""
    from_env = set(settings.getlist("CRAWLHUB_ENV_OVERRIDES"))
    problems = []
    for name, kind in RULES.items():
        raw = settings.get(name)
        if kind is None or raw is None or (kind.imports and not imports):
            continue
        try:
            kind.check(settings, name)
        except (ValueError, TypeError) as exc:
            problems.append(f"{_where(settings, name, kind, from_env)}: {exc}")
    if not problems:
        problems += _together(settings)
    return problems


def _together(settings: BaseSettings) -> list[str]:
    """What is wrong with settings that are right each alone."""
    problems = []
    # a lease is renewed every LEASE_TTL / 3, looked at every LEASE_MAINTENANCE_INTERVAL: it could expire between
    # two looks, and another worker's reclaim would queue its page again while it downloads (fetched twice)
    ttl, every = settings.getfloat("LEASE_TTL"), settings.getfloat("LEASE_MAINTENANCE_INTERVAL")
    if ttl < 2 * every:
        problems.append(f"LEASE_TTL ({ttl:g}) must be at least twice LEASE_MAINTENANCE_INTERVAL ({every:g}): a lease "
                        "could expire before its worker renews it, and its page be fetched again by another")
    if settings.getdict("PROXY_POOLS") or settings.get("PROXY_FILE"):
        try:
            pools = parse_pools(settings.getdict("PROXY_POOLS"), settings.get("PROXY_FILE") or None)
        except ValueError as exc:  # (the same proxy in both)
            problems.append(f"proxies: {exc}")
        else:
            unknown = [t for t in settings.getlist("PROXY_TIERS") if t not in pools]
            if unknown:
                problems.append(f"PROXY_TIERS names pools that are not configured: {', '.join(unknown)} "
                                f"(PROXY_POOLS and PROXY_FILE have {', '.join(pools) or 'none'})")
    pin = settings.get("HEADER_PROFILES_PIN")
    if pin and settings.getbool("HEADER_PROFILES_ENABLED"):
        ids = {p.id for p in load_profiles(settings.get("HEADER_PROFILES_FILE") or None)}
        if pin not in ids:
            problems.append(f"HEADER_PROFILES_PIN {pin!r} is not a profile id of "
                            f"{settings.get('HEADER_PROFILES_FILE') or 'the bundled profiles'}: "
                            "`crawlhub profiles list` shows them")
    return problems
