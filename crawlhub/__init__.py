"""crawlhub: a distributed Scrapy crawler on a shared Redis frontier, storing to MongoDB."""

__version__ = "0.1.0"
