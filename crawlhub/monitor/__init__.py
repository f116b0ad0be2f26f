"""What `crawlhub status`, `log`, `report` and the UI read and show of a crawl.

* :mod:`crawlhub.monitor.status`: the crawl's state as data (Redis and MongoDB), the rows
  of `limits show` and `partitions`, the project's spiders;
* :mod:`crawlhub.monitor.auditlog`: the audit log of fetches (read, filtered, one line each);
* :mod:`crawlhub.monitor.text`: the human view of the status;
* :mod:`crawlhub.monitor.report`: the self-contained HTML report.

Nothing here runs in a worker: workers write what this package reads (crawlhub.stats).
docs/cli.md documents the JSON of ``crawlhub status --json`` field by field.
"""
