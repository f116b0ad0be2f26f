"""scrapy-redis' settings and spider attributes in a crawlhub project: each is honoured, or refused at start
with one line naming crawlhub's equivalent (docs/scrapy-redis.md lists them from this table).

A project moved from scrapy-redis keeps working as it was written: its ``SCHEDULER`` and ``DUPEFILTER_CLASS``
become crawlhub's frontier, ``REDIS_HOST``/``REDIS_PORT`` its Redis, a spider's ``redis_key`` its seeds key. What
crawlhub cannot honour (pickled requests, a worker that flushes the shared frontier) stops the worker before
it starts, never silently.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from scrapy.settings import BaseSettings

SCRAPY_REDIS_SCHEDULER = "scrapy_redis.scheduler.Scheduler"
SCRAPY_REDIS_DUPEFILTER = "scrapy_redis.dupefilter.RFPDupeFilter"
ADDON_PRIORITY = 15  # Scrapy's "addon" priority: crawlhub's defaults; a higher one is the user's

# setting -> what crawlhub does with it (docs/scrapy-redis.md's table is checked against these names)
HONOURED = {
    "REDIS_URL": "the Redis of the crawl",
    "REDIS_HOST": "with REDIS_PORT, the Redis of the crawl when REDIS_URL is unset",
    "REDIS_PORT": "see REDIS_HOST",
    "REDIS_PARAMS": "passed to the Redis client",
    "REDIS_START_URLS_KEY": "the seeds key (the spider's `redis_key` wins)",
    "REDIS_START_URLS_AS_SET": "`crawlhub seed` SADDs to a new key; a worker reads a list, a set or a sorted set",
    "REDIS_START_URLS_AS_ZSET": "`crawlhub seed` ZADDs to a new key; read highest score first",
    "REDIS_START_URLS_BATCH_SIZE": "seeds read per batch (crawlhub's SEED_BATCH_SIZE wins)",
    "REDIS_ENCODING": "utf-8 only (seeds are UTF-8 text)",
    "MAX_IDLE_TIME_BEFORE_CLOSE": "seconds the cluster's frontier stays empty before a worker closes (0 = never)",
    "SCHEDULER": f"{SCRAPY_REDIS_SCHEDULER} becomes crawlhub's frontier",
    "DUPEFILTER_CLASS": f"{SCRAPY_REDIS_DUPEFILTER} becomes crawlhub's shared filter",
    "SCHEDULER_QUEUE_KEY": "the queue's key prefix",
    "SCHEDULER_DUPEFILTER_KEY": "the duplicate filter's key prefix",
    "SCHEDULER_PERSIST": "always True: False is ignored with a warning (a worker never flushes the shared frontier)",
    "SCHEDULER_FLUSH_ON_START": "ignored with a warning naming `crawlhub reset SPIDER`",
}
# a spider's scrapy-redis attribute -> the setting it stands for (set at the "spider" priority by
# CrawlhubSpider.update_settings, so the crawlhub command reads the same keys as the workers)
ATTRIBUTES = {
    "redis_key": "REDIS_START_URLS_KEY",
    "redis_batch_size": "SEED_BATCH_SIZE",
    "max_idle_time": "MAX_IDLE_TIME_BEFORE_CLOSE",
    "redis_encoding": "REDIS_ENCODING",
}


def _truthy(value: Any) -> bool:
    return str(value).strip().lower() not in ("", "0", "false", "no", "off", "none")


# setting -> (is the value refused?, why, and crawlhub's equivalent)
REFUSED: dict[str, tuple[Callable[[Any], bool], str]] = {
    "SCHEDULER_QUEUE_CLASS": (_truthy, "crawlhub's frontier has its own per-domain priority queues "
                              "(request.priority orders them; DOMAIN_RATE and DOMAIN_CONCURRENCY pace each domain)"),
    "SCHEDULER_SERIALIZER": (_truthy, "the frontier stores requests as JSON only (crawlhub.frontier.serializer): "
                             "pickle read from a shared server runs code"),
    "SCHEDULER_IDLE_BEFORE_CLOSE": (_truthy, "workers wait on the shared frontier by design: "
                                    "MAX_IDLE_TIME_BEFORE_CLOSE closes a worker once the cluster's frontier is empty"),
    "REDIS_ENCODING": (lambda v: str(v).lower().replace("_", "-") not in ("utf-8", "utf8"),
                       "seeds are read as UTF-8 text (a JSON seed's \\u escapes carry any character)"),
}


def users(settings: BaseSettings, name: str) -> bool:
    """Whether ``name`` was set by the project, the spider, the environment or ``-s`` (not crawlhub's default)."""
    priority = settings.getpriority(name)
    return priority is not None and priority > ADDON_PRIORITY


def translate(settings: BaseSettings) -> list[str]:
    """Honour what can be (scrapy-redis' scheduler and filter become crawlhub's, REDIS_HOST/REDIS_PORT the
    REDIS_URL); returns one line per setting that is refused, naming crawlhub's equivalent."""
    if settings.get("SCHEDULER") == SCRAPY_REDIS_SCHEDULER:
        settings.set("SCHEDULER", "crawlhub.frontier.scheduler.RedisScheduler", settings.getpriority("SCHEDULER") or 0)
    if settings.get("DUPEFILTER_CLASS") == SCRAPY_REDIS_DUPEFILTER:
        settings.set("DUPEFILTER_CLASS", "crawlhub.frontier.dupefilter.RedisDupeFilter",
                     settings.getpriority("DUPEFILTER_CLASS") or 0)
    if not settings.get("REDIS_URL") and (users(settings, "REDIS_HOST") or users(settings, "REDIS_PORT")):
        host = settings.get("REDIS_HOST") or "localhost"
        settings.set("REDIS_URL", f"redis://{host}:{settings.getint('REDIS_PORT', 6379)}",
                     max(settings.getpriority("REDIS_HOST") or 0, settings.getpriority("REDIS_PORT") or 0))
    problems = []
    for name, (refused, why) in REFUSED.items():
        if users(settings, name) and refused(settings.get(name)):
            problems.append(f"{name} = {settings.get(name)!r} (scrapy-redis) is not supported: {why}")
    return problems
