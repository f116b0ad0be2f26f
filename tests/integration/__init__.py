"""Integration tests: real Redis, MongoDB-wire servers, local sites and `scrapy crawl` processes."""
