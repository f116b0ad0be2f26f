"""FrontierRetryMiddleware: retries through the shared frontier, with backoff.

Replaces Scrapy's RetryMiddleware (same place, 550). A timeout, connection
error, 5xx, 408 or 429 does not retry in place: the request goes to
``<spider>:delayed`` with its attempt count, due after an exponential backoff
with jitter (RETRY_BACKOFF_BASE * 2**(attempt-1), at most RETRY_BACKOFF_MAX,
and never before a Retry-After header says). Any worker takes it up when it
is due, and a waiting retry holds no download slot. After RETRY_TIMES retries
the request goes to ``<spider>:dlq``. HTTP_GONE_CODES (404, 410) are permanent:
not retried, counted per domain. Any other error status that is not retried
(400, 401, 403, 451, 501, ...) and that the spider does not handle (Scrapy's
``handle_httpstatus_list``, ``handle_httpstatus_all``, HTTPERROR_ALLOWED_CODES,
HTTPERROR_ALLOW_ALL) goes to the dead-letter list with its status, where
Scrapy's HttpErrorMiddleware would ignore it at INFO.
"""

from __future__ import annotations

import email.utils
import time

from scrapy.crawler import Crawler
from scrapy.exceptions import IgnoreRequest
from scrapy.http import Request, Response
from scrapy.utils.misc import load_object
from scrapy.utils.response import response_status_message

from crawlhub import intent
from crawlhub._utils.errors import failure_text
from crawlhub._utils.urls import domain_of
from crawlhub.components import FrontierMiddleware
from crawlhub.intent import leased

HTTPERROR = "scrapy.spidermiddlewares.httperror.HttpErrorMiddleware"


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

    def __init__(self, crawler: Crawler) -> None:
        super().__init__(crawler)
        settings = crawler.settings
        self.enabled = settings.getbool("RETRY_ENABLED")
        self.codes = {int(c) for c in settings.getlist("RETRY_HTTP_CODES")}
        self.exceptions = tuple(
            load_object(e) if isinstance(e, str) else e for e in settings.getlist("RETRY_EXCEPTIONS")
        )
        self.gone = {int(c) for c in settings.getlist("HTTP_GONE_CODES")}
        # Scrapy's HttpErrorMiddleware ignores the error statuses a spider does not handle; turned off, the spider gets all
        self.httperror = settings.getwithbase("SPIDER_MIDDLEWARES").get(HTTPERROR) is not None
        self.allow_all = settings.getbool("HTTPERROR_ALLOW_ALL")
        self.allowed = {int(c) for c in settings.getlist("HTTPERROR_ALLOWED_CODES")}

    def process_response(self, request: Request, response: Response) -> Request | Response:
        frontier = self.frontier
        if frontier is None or not leased(request):  # robots.txt and other side requests: as in plain Scrapy
            return response
        status = response.status
        if status in self.gone:
            domain = domain_of(request.url)
            self.crawler.stats.inc_value(f"permanent_failures/{domain}")
            frontier.count(f"permanent_failures:{domain}")
            return response
        if self.enabled and not request.meta.get("dont_retry") and status in self.codes:
            wait = retry_after_seconds(response.headers.get(b"Retry-After"))
            return intent.retry(request, response_status_message(status), after=wait, status=status)
        if status >= 400 and not self.spider_handles(request, status):
            why = ("not retried" if status not in self.codes
                   else "dont_retry" if request.meta.get("dont_retry") else "RETRY_ENABLED is off")
            return intent.dead_letter(request, f"HTTP {response_status_message(status)} ({why})", status=status)
        return response

    def spider_handles(self, request: Request, status: int) -> bool:
        """Whether the spider's callback gets this error status (Scrapy's HttpErrorMiddleware's rules)."""
        if not self.httperror or request.meta.get("handle_httpstatus_all"):
            return True
        if "handle_httpstatus_list" in request.meta:
            return status in request.meta["handle_httpstatus_list"]
        if self.allow_all:
            return True
        spider = self.crawler.spider
        return status in getattr(spider, "handle_httpstatus_list", self.allowed)

    def process_exception(self, request: Request, exception: BaseException) -> Request | Response | None:
        if self.frontier is None or not leased(request) or request.meta.get("dont_retry") or not self.enabled:
            return None
        if isinstance(exception, self.exceptions) and not isinstance(exception, IgnoreRequest):
            return intent.retry(request, failure_text(exception, 500))
        return None
