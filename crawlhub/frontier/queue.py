"""The request encoding of the shared queue (scrapy-redis's queue class, JSON only).

RedisScheduler queues and takes requests through the frontier's scripts
(:mod:`crawlhub.frontier.leases`: FIFO lists per domain and priority); this
class supplies the encoding and what
happens to a payload that does not decode (pickle, garbage, a class or
callback we do not allow): it is never executed, but logged with the reason
and set aside in ``<spider>:bad_requests`` for inspection.
"""

from __future__ import annotations

import json
import logging
import time

from scrapy_redis.queue import PriorityQueue

from crawlhub.frontier.serializer import DEFAULT_ALLOWED_CLASSES, RequestSerializer

logger = logging.getLogger(__name__)

class JsonPriorityQueue(PriorityQueue):
    """Redis sorted set of JSON requests (score = -priority)."""

    def __init__(
        self,
        server,
        spider,
        key,
        serializer=None,
        *,
        allowed_classes=DEFAULT_ALLOWED_CLASSES,
        bad_key=None,
        bad_max=10000,
        stats=None,
    ):
        # Not calling Base.__init__: it falls back to pickle when no
        # serializer is given, and we never want that.
        self.server = server
        self.spider = spider
        self.key = key % {"spider": spider.name}
        self.serializer = serializer or RequestSerializer(spider, allowed_classes)
        self.bad_key = bad_key or f"{spider.name}:bad_requests"
        self.bad_max = bad_max
        self.stats = stats

    def _encode_request(self, request):
        return self.serializer.encode(request)

    def _decode_request(self, encoded_request):
        return self.serializer.decode(encoded_request)

    def set_aside(self, payload: bytes, reason: str) -> None:
        """Keep an undecodable payload in <spider>:bad_requests, with why."""
        logger.warning(
            "Refused a request payload from %s (%s); set aside in %s",
            self.key, reason, self.bad_key, extra={"spider": self.spider},
        )
        if self.stats:
            self.stats.inc_value("frontier/bad_requests")
        record = json.dumps(
            {
                "reason": reason,
                "payload": payload[:4096].decode("utf-8", "backslashreplace"),
                "queue": self.key,
                "at": time.time(),
            }
        )
        with self.server.pipeline() as pipe:
            pipe.lpush(self.bad_key, record).ltrim(self.bad_key, 0, self.bad_max - 1).execute()
