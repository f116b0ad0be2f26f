"""Clients for the shared servers, built from settings.

REDIS_URL / MONGO_URI unset means the embedded local servers
(:mod:`crawlhub.services`), started on first use.
"""

from __future__ import annotations

import logging
import time

import redis
from redis.backoff import ExponentialBackoff
from redis.retry import Retry

from crawlhub import services
from crawlhub.config import redact_url

logger = logging.getLogger(__name__)


class Unreachable(ConnectionError):
    """A shared server could not be reached; the message names it (password redacted)."""

REDIS_PARAMS = {
    "socket_timeout": 30,
    "socket_connect_timeout": 10,
    "retry_on_timeout": True,
    "health_check_interval": 30,
}


def get_redis(settings) -> redis.Redis:
    """A Redis client (bytes responses) for REDIS_URL or the embedded server."""
    params = dict(REDIS_PARAMS)
    # a restarted Redis: reconnect with backoff (about 20 s in all) before failing
    params["retry"] = Retry(ExponentialBackoff(cap=3.0, base=0.1), settings.getint("REDIS_RETRIES", 10))
    params["retry_on_error"] = [redis.ConnectionError, redis.TimeoutError]
    params.update(settings.getdict("REDIS_PARAMS"))
    return redis.Redis.from_url(services.redis_url(settings), **params)


def connect_redis(settings) -> redis.Redis:
    """get_redis(), waiting up to REDIS_STARTUP_WAIT seconds for the server to answer.

    Raises :class:`Unreachable` with a one-line reason when it does not.
    """
    url = services.redis_url(settings)
    server = get_redis(settings)
    retry = server.get_retry()
    server.set_retry(Retry(ExponentialBackoff(), 0))  # our own loop below says what happens
    deadline = time.monotonic() + settings.getfloat("REDIS_STARTUP_WAIT", 30)
    delay = 0.5
    while True:
        try:
            server.ping()
            server.set_retry(retry)
            return server
        except redis.AuthenticationError as exc:
            raise Unreachable(f"Redis at {redact_url(url)} refused the credentials: {exc} (a final answer: "
                              "check the password in REDIS_URL)") from None
        except redis.ResponseError as exc:
            if not _is_auth_error(exc):
                raise
            raise Unreachable(f"Redis at {redact_url(url)} refused the credentials: {exc} (a final answer: "
                              "check the password in REDIS_URL)") from None
        except redis.RedisError as exc:
            if time.monotonic() + delay > deadline:
                raise Unreachable(f"cannot reach Redis at {redact_url(url)}: {exc}") from None
            logger.warning("Redis at %s is not answering (%s); retrying in %.1fs", redact_url(url), exc, delay)
            time.sleep(delay)
            delay = min(delay * 2, 5)


def _is_auth_error(exc: Exception) -> bool:
    text = str(exc).upper()
    return any(word in text for word in ("WRONGPASS", "NOAUTH", "AUTH ", "INVALID PASSWORD", "INVALID USERNAME"))


def get_mongo(settings, server_selection_timeout_ms: int | None = None):
    """A pymongo client for MONGO_URI or the embedded server."""
    import pymongo

    return pymongo.MongoClient(
        services.mongo_uri(settings),
        serverSelectionTimeoutMS=server_selection_timeout_ms or settings.getint("MONGO_SERVER_SELECTION_TIMEOUT_MS", 10000),
        appname=settings.get("BOT_NAME", "crawlhub"),
    )
