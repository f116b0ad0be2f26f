"""Downloader and spider middlewares: leases, retries, politeness, robots.txt."""


def frontier_scheduler(crawler, needs: str = "lease_of"):
    """The running crawl's scheduler if it is crawlhub's (it has ``needs``), else None."""
    try:
        engine = crawler.engine
    except RuntimeError:  # the crawl has not started (Scrapy sets the engine then)
        return None
    scheduler = engine.scheduler if engine else None
    return scheduler if getattr(scheduler, needs, None) is not None else None


class FrontierMiddleware:
    """Base of the middlewares that work with crawlhub's scheduler (``needs`` names what they use)."""

    needs = "lease_of"

    def __init__(self, crawler):
        self.crawler = crawler

    @classmethod
    def from_crawler(cls, crawler):
        return cls(crawler)

    @property
    def scheduler(self):
        return frontier_scheduler(self.crawler, self.needs)
