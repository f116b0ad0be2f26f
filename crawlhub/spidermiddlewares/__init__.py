"""crawlhub's spider middlewares, one module each (Scrapy's layout): leases (10)."""
