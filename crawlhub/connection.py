"""Clients for the shared servers, built from settings.

REDIS_URL / MONGO_URI unset means the embedded local servers
(:mod:`crawlhub.services`), started on first use.
"""

from __future__ import annotations

import redis

from crawlhub import services

REDIS_PARAMS = {
    "socket_timeout": 30,
    "socket_connect_timeout": 10,
    "retry_on_timeout": True,
    "health_check_interval": 30,
}


def get_redis(settings) -> redis.Redis:
    """A Redis client (bytes responses) for REDIS_URL or the embedded server."""
    params = dict(REDIS_PARAMS)
    params.update(settings.getdict("REDIS_PARAMS"))
    return redis.Redis.from_url(services.redis_url(settings), **params)


def get_mongo(settings):
    """A pymongo client for MONGO_URI or the embedded server."""
    import pymongo

    return pymongo.MongoClient(
        services.mongo_uri(settings),
        serverSelectionTimeoutMS=settings.getint("MONGO_SERVER_SELECTION_TIMEOUT_MS", 10000),
        appname=settings.get("BOT_NAME", "crawlhub"),
    )
