"""crawlhub's downloader middlewares, one module each (wired by crawlhub.Addon; docs/architecture.md)."""
