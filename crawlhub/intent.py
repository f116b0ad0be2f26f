"""How a component says what becomes of a leased request: through Scrapy's own paths.

A downloader middleware never calls the frontier. It returns one of these
requests from ``process_request``, ``process_response`` or
``process_exception``, as Scrapy's own RetryMiddleware returns a retry: Scrapy's
engine sends it to the scheduler, and the scheduler (the only component that
talks to the frontier client) carries out the decision in the request's meta
(``crawlhub.meta.END``) on the lease the request holds:

* :func:`retry`: back to the shared frontier after a backoff, counting an
  attempt, or to the dead-letter list after RETRY_TIMES;
* :func:`postpone`: back for later without counting an attempt (its site is
  not ready: robots.txt unavailable);
* :func:`dead_letter`: the dead-letter list with the reason (and status);
* :func:`drop`: the request will not be fetched (a 304, an offsite redirect):
  its lease ends, nothing is stored.

Such a request is never fetched. Use them for a leased request only
(:func:`leased`): off the shared frontier (``scrapy shell``, another
scheduler) a component raises IgnoreRequest or lets Scrapy do as it does.

A drop may also be an exception (IgnoreRequest) raised in ``process_request``
or by the download, and a failed download an exception: the lease middleware
(crawlhub.frontier.hooks) hears both. Items and callbacks report through
Scrapy's signals; what is left, the lease warden's sweep ends.
"""

from __future__ import annotations

from typing import Literal, TypedDict

from scrapy import Request

from crawlhub import meta

__all__ = ["End", "dead_letter", "drop", "leased", "postpone", "retry"]


class End(TypedDict, total=False):
    """What ``request.meta[crawlhub.meta.END]`` holds."""

    how: Literal["retry", "postpone", "dead_letter", "drop"]
    reason: str
    after: float  # retry: at the earliest after (Retry-After); postpone: after
    status: int | None


def leased(request: Request) -> bool:
    """Whether the request holds a lease of the shared frontier (its end is then the frontier's to carry out)."""
    return bool(request.meta.get(meta.LEASE))


def _ending(request: Request, end: End) -> Request:
    again = request.replace(dont_filter=True)
    again.meta[meta.END] = end
    return again


def retry(request: Request, reason: str, *, after: float = 0.0, status: int | None = None) -> Request:
    return _ending(request, End(how="retry", reason=reason, after=after, status=status))


def postpone(request: Request, seconds: float, reason: str) -> Request:
    return _ending(request, End(how="postpone", reason=reason, after=seconds))


def dead_letter(request: Request, reason: str, *, status: int | None = None) -> Request:
    return _ending(request, End(how="dead_letter", reason=reason[:1000], status=status))


def drop(request: Request, reason: str) -> Request:
    return _ending(request, End(how="drop", reason=reason))
