"""FrontierRetryMiddleware: retries through the shared frontier, with backoff.

Replaces Scrapy's RetryMiddleware (same place, 550). A timeout, connection
error, 5xx, 408 or 429 does not retry in place: the request goes to
``<spider>:delayed`` with its attempt count, due after an exponential backoff
with jitter (RETRY_BACKOFF_BASE * 2**(attempt-1), at most RETRY_BACKOFF_MAX,
and never before a Retry-After header says). Any worker takes it up when it
is due, and a waiting retry holds no download slot. After RETRY_TIMES retries
the request goes to ``<spider>:dlq``. 404 and 410 are permanent: not retried,
counted per domain.
"""

from __future__ import annotations

import email.utils
import time

from scrapy.exceptions import IgnoreRequest
from scrapy.utils.misc import load_object
from scrapy.utils.response import response_status_message

from crawlhub.components import FrontierMiddleware

PERMANENT = {404, 410}


def retry_after_seconds(value: bytes | None) -> float:
    """Retry-After as seconds: delta-seconds or an HTTP date; 0 when absent or unreadable."""
    if not value:
        return 0.0
    text = value.decode("latin-1").strip()
    if text.isdigit():
        return float(text)
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError):
        return 0.0
    return max(0.0, when.timestamp() - time.time())


class FrontierRetryMiddleware(FrontierMiddleware):

    def __init__(self, crawler):
        super().__init__(crawler)
        settings = crawler.settings
        self.enabled = settings.getbool("RETRY_ENABLED")
        self.codes = {int(c) for c in settings.getlist("RETRY_HTTP_CODES")}
        self.exceptions = tuple(
            load_object(e) if isinstance(e, str) else e for e in settings.getlist("RETRY_EXCEPTIONS")
        )

    def process_response(self, request, response):
        frontier = self.frontier
        if frontier is None or request.meta.get("dont_retry") or not self.enabled:
            return response
        if response.status in PERMANENT:
            frontier.permanent_failure(request, response.status)
            return response
        if response.status in self.codes:
            wait = retry_after_seconds(response.headers.get(b"Retry-After"))
            outcome = frontier.retry(request, response_status_message(response.status), wait, response.status)
            if outcome:
                raise IgnoreRequest(f"{response.status}: {outcome} scheduled through the frontier")
        return response

    def process_exception(self, request, exception):
        frontier = self.frontier
        if frontier is None or request.meta.get("dont_retry") or not self.enabled:
            return None
        if isinstance(exception, self.exceptions) and not isinstance(exception, IgnoreRequest):
            outcome = frontier.retry(request, f"{type(exception).__name__}: {exception}"[:500])
            if outcome:
                raise IgnoreRequest(f"{type(exception).__name__}: {outcome} scheduled through the frontier")
        return None
