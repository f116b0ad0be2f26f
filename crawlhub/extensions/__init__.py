"""crawlhub's Scrapy extensions, one module each (Scrapy's layout): workers (the worker registry and its heartbeats)."""
