"""crawlhub's own signals (sent with crawler.signals, like Scrapy's).

The item store and the scheduler agree through them on when a lease may be
released: only after the items of its page are written.

- ``store_opened``: a store that acknowledges writes is in use; leases wait
  for its flushes instead of being acked when their page is processed.
- ``flush_started``: the store begins a flush; receivers return the lease
  tokens that the flush covers (everything ready before it began).
- ``flush_succeeded(tokens)``: those tokens' items are stored.
- ``flush_failed(tokens)``: they are not; keep them for the next flush.
- ``store_backlog(full)``: the store's buffer is full (True: take no new
  requests) or has drained (False).
"""

store_opened = object()
flush_started = object()
flush_succeeded = object()
flush_failed = object()
store_backlog = object()
