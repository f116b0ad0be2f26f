"""LeaseDownloaderMiddleware: a dropped or failed request's lease ends.

It sits closest to the engine among downloader middlewares (10): every
exception on the way (robots.txt and offsite drops raise IgnoreRequest;
download errors that the retry middleware did not take) reaches its
``process_exception``. A dropped request's lease is acked; any other error
sends it to the dead-letter queue with the error. (Exceptions raised in a
``process_response`` reach no ``process_exception``: crawlhub's redirect
middlewares end their leases themselves.)

A dead-lettered request without an errback ends as :class:`DeadLettered` (an
IgnoreRequest): the dead-letter line says what failed and where the request
went, and Scrapy's own "Error downloading" traceback would only repeat it.
A request with an errback gets the original failure, as always.
"""

from __future__ import annotations

from scrapy.exceptions import IgnoreRequest

from crawlhub._utils.errors import download_failure_text
from crawlhub.components import frontier_of


class DeadLettered(IgnoreRequest):
    """A download failed for good and its request is in the dead-letter list (the message says why)."""


class LeaseDownloaderMiddleware:
    def __init__(self, crawler):
        self.crawler = crawler

    @classmethod
    def from_crawler(cls, crawler):
        return cls(crawler)

    def process_exception(self, request, exception):
        frontier = frontier_of(self.crawler)
        if frontier is None or frontier.lease_of(request) is None:
            return None
        if isinstance(exception, IgnoreRequest):
            frontier.dropped(request, str(exception) or type(exception).__name__)
            return None
        reason = download_failure_text(exception, request, self.crawler.settings.getint("DOWNLOAD_MAXSIZE"))
        frontier.dead_letter(request, error=reason)
        if request.errback is None:  # the dead-letter line said it all: no second ERROR with a traceback
            raise DeadLettered(reason)
        return None
