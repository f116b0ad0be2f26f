"""The cluster's counters of one worker (``<spider>:stats``), sent with the next upkeep."""

from __future__ import annotations

from collections import Counter

import redis

from crawlhub.connection import REDIS_ERRORS


class ClusterCounters:
    """Counters added to ``<spider>:stats`` with the next upkeep (held while Redis is down)."""

    def __init__(self, server: redis.Redis, key: str):
        self.server, self.key = server, key
        self.pending: Counter[str] = Counter()

    def count(self, field: str, n: int = 1) -> None:
        self.pending[field] += n

    def send(self) -> None:
        counts, self.pending = self.pending, Counter()
        if not counts:
            return
        try:
            pipe = self.server.pipeline(transaction=False)
            for field, n in counts.items():
                pipe.hincrby(self.key, field, n)
            pipe.execute()
        except REDIS_ERRORS:
            self.pending.update(counts)  # sent when Redis is back
            raise
