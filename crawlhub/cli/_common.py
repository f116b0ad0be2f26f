"""What every command group shares: the project's settings, Redis, spider names, exit codes."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import click
import redis
from scrapy.settings import Settings

from crawlhub import services
from crawlhub._utils.urls import domain_of
from crawlhub.addon import known_spiders, spider_settings, tool_settings
from crawlhub.frontier.keys import Keys
from crawlhub.settings_check import check_settings

if TYPE_CHECKING:
    from pymongo.database import Database


class ServiceDown(click.ClickException):
    """Redis (or another service) cannot be reached: exit code 3."""

    exit_code = 3


class BadInput(click.ClickException):
    """An unknown spider, a bad URL or seed: exit code 2 (like a usage error)."""

    exit_code = 2


def settings(spider: str | None = None) -> Settings:
    """The project's settings; with ``spider``, as that spider's workers have them (its ``custom_settings`` and
    ``redis_key``: the keys it reads), when the project has it."""
    current = tool_settings()
    if spider is not None:
        current = spider_settings(current, spider)  # type: ignore[assignment]
    # as a worker would refuse them (crawlhub.commands.crawl), less what only a worker imports (its classes, drivers)
    problems = check_settings(current, imports=False)
    if problems:
        raise BadInput("; ".join(problems))
    return current


def spider_class(name: str) -> type | None:
    """The project's spider class named ``name``; None when the project has none of that name."""
    from scrapy.spiderloader import get_spider_loader

    try:
        return get_spider_loader(settings()).load(name)
    except KeyError:
        return None


def connect() -> redis.Redis:
    """Redis, or exit 3 with why (the CLI waits at most 3 s for it)."""
    from crawlhub.connection import BadURL, Unreachable, connect_redis

    current = settings()
    current.set("REDIS_STARTUP_WAIT", min(current.getfloat("REDIS_STARTUP_WAIT"), 3))
    current.set("REDIS_RETRIES", min(current.getint("REDIS_RETRIES"), 2))
    try:
        return connect_redis(current)
    except (BadURL, services.NoProject) as exc:
        raise BadInput(str(exc)) from None
    except (Unreachable, services.ServiceError) as exc:
        raise ServiceDown(str(exc)) from None


@contextmanager
def mongo_database(current: Settings, timeout_ms: int = 5000) -> Iterator[Database[Any]]:
    """The project's MongoDB database (MONGO_URI or the embedded server), closed after; what MongoDB raises inside
    ends the command with exit 3 and where it looked (without the password), no project here with exit 2."""
    from pymongo.errors import PyMongoError

    from crawlhub.config import redact_url
    from crawlhub.connection import get_mongo, mongo_error

    uri = current.get("MONGO_URI") or "the embedded MongoDB"
    client = None
    try:
        client = get_mongo(current, timeout_ms)
        yield client[current.get("MONGO_DATABASE")]
    except services.NoProject as exc:
        raise BadInput(str(exc)) from None
    except (PyMongoError, services.ServiceError) as exc:
        raise ServiceDown(f"cannot read MongoDB at {redact_url(uri)}: {mongo_error(exc)}") from None
    finally:
        if client is not None:
            client.close()


def keys(spider: str, server: redis.Redis | None = None) -> Keys:
    """The spider's keys, its frontier's partitions as recorded in Redis (``server``, else a new connection)."""
    from crawlhub.frontier.partitions import frontier_keys

    return frontier_keys(server if server is not None else connect(), settings(spider), spider)


def spider_name(name: str) -> str:
    """The spider name, if the project has such a spider (else exit 2 with the list)."""
    known = known_spiders(settings())
    if name not in known:
        try:
            services.project_dir(required=True)
        except services.NoProject as exc:
            raise BadInput(f"unknown spider {name!r}: {exc}") from None
        raise BadInput(f"unknown spider {name!r}; this project's spiders: {', '.join(known)}")
    return name


def check_spider(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    return spider_name(value) if value is not None else None


def spider_or_leftover(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """A spider of the project, or one that no longer exists but left keys in Redis (to clean them)."""
    if value is None or value in known_spiders(settings()):
        return value
    if any(connect().scan_iter(f"{value}:*", count=1000)):
        return value
    return spider_name(value)


def domain(value: str) -> str:
    """A domain as crawlhub keys it; a URL is accepted too."""
    return domain_of(value if "://" in value else f"http://{value}")


def shown_seed(text: str, most: int = 200) -> str:
    """A stored seed as it was pushed: undecodable bytes as single \\xNN escapes (the record keeps
    them that way), control characters escaped, quoted, cut at ``most``."""
    cut = text[:most] + ("..." if len(text) > most else "")
    return "'" + "".join(c if c.isprintable() or c == "\\" else c.encode("unicode_escape").decode() for c in cut) + "'"
