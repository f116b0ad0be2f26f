"""``failure_text``: what a dead letter, a retry or a log line says of an exception."""

from __future__ import annotations

from scrapy import exceptions
from scrapy.http import Request
from twisted.internet.defer import CancelledError

# what a cancelled download raises: Twisted's CancelledError, which Scrapy 2.14+ wraps as DownloadCancelledError
CANCELLED = (CancelledError, *([exceptions.DownloadCancelledError] if hasattr(exceptions, "DownloadCancelledError") else []))


def failure_text(exc: BaseException, limit: int = 1000) -> str:
    """The exception's class and message (its class alone when it has none): never empty, at most ``limit``."""
    message = str(exc).strip()
    return (f"{type(exc).__name__}: {message}" if message else type(exc).__name__)[:limit]


def download_failure_text(exc: BaseException, request: Request, default_maxsize: int, limit: int = 1000) -> str:
    """What a failed download's dead letter says. A bare cancellation from the download handler is the answer
    passing the size limit (the request's ``download_maxsize``, else DOWNLOAD_MAXSIZE) with no Content-Length
    to announce it: Scrapy logs a warning and cancels with no message, so the reason names the limit."""
    maxsize = request.meta.get("download_maxsize", default_maxsize)
    if isinstance(exc, CANCELLED) and not str(exc).strip() and maxsize:
        return (f"download cancelled: the answer grew past DOWNLOAD_MAXSIZE ({maxsize} bytes) "
                "without a Content-Length announcing it")[:limit]
    return failure_text(exc, limit)
