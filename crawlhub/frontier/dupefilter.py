"""The shared duplicate filter: a Redis set of request fingerprints.

Fingerprints are Scrapy's own (``crawler.request_fingerprinter``), so
REQUEST_FINGERPRINTER_CLASS applies as in plain Scrapy. Closing a worker never
clears the set: other workers are still using it.
"""

from __future__ import annotations

from scrapy_redis.dupefilter import RFPDupeFilter


class RedisDupeFilter(RFPDupeFilter):
    def __init__(self, server, key, debug=False, *, fingerprinter=None, stats=None):
        super().__init__(server, key, debug=debug)
        self.fingerprinter = fingerprinter
        self.stats = stats

    @classmethod
    def for_spider(cls, crawler, server, spider):
        key = crawler.settings.get("SCHEDULER_DUPEFILTER_KEY") % {"spider": spider.name}
        return cls(
            server,
            key,
            debug=crawler.settings.getbool("DUPEFILTER_DEBUG"),
            fingerprinter=crawler.request_fingerprinter,
            stats=crawler.stats,
        )

    def request_fingerprint(self, request) -> str:
        if self.fingerprinter is not None:
            return self.fingerprinter.fingerprint(request).hex()
        return super().request_fingerprint(request)

    def close(self, reason=""):
        """Keep the shared set (scrapy-redis deletes it here)."""

    def log(self, request, spider):
        if self.stats:
            self.stats.inc_value("dupefilter/filtered")
        super().log(request, spider)
