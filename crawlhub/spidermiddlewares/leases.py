"""The lease spider middleware: the lease warden's hook (crawlhub/frontier/hooks.py), at its settings path."""

from crawlhub.frontier.hooks import LeaseSpiderMiddleware

__all__ = ["LeaseSpiderMiddleware"]
