"""Continuous crawling: when each page is due again, and what a revisit found.

``policy.py`` (the spider's intervals and the adaptive schedule) and
``store.py`` (the URL status store in MongoDB: the cold side of the
frontier). The components that use them: the downloader middleware
``crawlhub.downloadermiddlewares.revisit`` (conditional GET, each fetch's
news for the store) and the extension ``crawlhub.extensions.refresher``
(moves due URLs into the Redis frontier, exactly once per due time).
docs/revisit.md has the design.
"""
