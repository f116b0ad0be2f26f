"""The lease downloader middleware: the lease warden's hook (crawlhub/frontier/hooks.py), at its settings path."""

from crawlhub.frontier.hooks import DeadLettered, LeaseDownloaderMiddleware

__all__ = ["DeadLettered", "LeaseDownloaderMiddleware"]
