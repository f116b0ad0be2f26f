"""crawlhub's own signals (Scrapy's idiom: ``crawler.signals.connect(handler, signal=...)``).

``items_stored``
    Sent by :class:`crawlhub.pipelines.mongo.MongoPipeline` after a write to
    MongoDB succeeded. Arguments: ``count`` (documents stored for the first
    time in the frontier's current epoch, each counted once across the whole
    cluster: a page crawled twice, by a worker that was stopped past its
    lease, stores nothing new), ``epoch`` (the id of that epoch,
    crawlhub/frontier/epoch.py). The cluster stats count it as the crawl's
    ``items`` (docs/cli.md), which therefore equals what the store holds for
    this cycle.
"""

from __future__ import annotations

items_stored = object()
