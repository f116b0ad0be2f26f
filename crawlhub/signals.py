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

``page_done``
    Sent by the frontier client when a leased page's work is done (its
    callback's output consumed, every item through the pipelines), before its
    lease waits for the store's next flush; not for a page whose callback
    raised (it goes to the dead-letter list). Arguments: ``request``,
    ``status`` (the answer's HTTP status), ``items`` (items the page yielded),
    ``invalid`` (of which quarantined), ``after_store`` (what the URL status
    store does once the page's items are stored: the fetch's
    ``StatusUpdate``, a ``GoneCheck`` for a page fetched again; a handler may
    amend them, as :class:`crawlhub.extensions.quality.QualityMonitor` does
    for a page whose extraction it judges broken).

``download_finished``
    Sent by :class:`crawlhub.downloadermiddlewares.politeness.PolitenessMiddleware`
    for every raw answer or download error, before redirects and retries act
    on it. Arguments: ``request``, ``status`` (None for an error),
    ``retry_after`` (seconds a Retry-After header asks for, 0 without one).
    The frontier frees the domain's concurrency slot with its next round
    trip, and a 429/503 slows the domain down for every worker at once.

``status_observed``
    Sent when the URL status store has news to write with the store's next
    flush: a done page's ``after_store`` (as its judges left it), a 304's
    ``StatusUpdate``, a sitemap's ``lastmod``. Argument: ``updates`` (a list).
    MongoPipeline keeps them in its own buffer and writes them in the flush
    that writes the page's items, after the items; the page's lease ends after
    that flush, so no lease is acked before its page's next visit is stored.

``items_changed``
    Sent by MongoPipeline after a write that changed stored documents.
    Argument: ``changes``, the write's change history (records of
    ``{collection, key, field, old, new, at, url, spider}``, as stored in
    CHANGES_COLLECTION). QualityMonitor raises its change alerts from
    them.

``stats_flushing``
    Sent by :class:`crawlhub.downloadermiddlewares.stats.ClusterStatsMiddleware`
    before each of its flushes to Redis. A handler returns counts to add in
    that same pipeline: a list of ``(key, {field: amount}, ttl_seconds)``;
    they are held and sent again if Redis is down. QualityMonitor sends its
    figures this way (no round trip of their own).

``quality_events``
    Sent by QualityMonitor when this worker opened or closed quality events
    or raised change alerts. Argument: ``events`` (a list of dicts, each with
    ``state``: ``opened``, ``closed`` or ``alert``, ``spider``, ``kind``,
    ``subject``, ``why``...). The webhook action
    (:class:`crawlhub.extensions.webhook.QualityWebhook`) posts them.

``quality_checked``
    Sent by QualityMonitor after each check of the cluster's figures.
    Arguments: ``spider``, ``score`` (the cycle's, 0..100), ``coverage``
    (``{"Type.field": share}``), ``events`` (open events by kind, counts).
    ClusterStatsMiddleware sets its Prometheus gauges from it.

``ladder_moved``
    Sent by :class:`crawlhub.downloadermiddlewares.ladder.LadderBlockMiddleware` when a script call moved a
    domain on the ladder (a climb, a descent). Arguments: ``domain``, ``state`` (the domain's entry in
    ``crawlhub:{ladder}``, None: back on plain). LadderMiddleware updates its copy at once (the other
    workers' copies learn it with their next read, LADDER_REFRESH).
"""

from __future__ import annotations

items_stored = object()
page_done = object()
items_changed = object()
download_finished = object()
status_observed = object()
stats_flushing = object()
quality_events = object()
quality_checked = object()
ladder_moved = object()
