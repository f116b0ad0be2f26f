"""LogFormatter: Scrapy's, which also notes an unhandled download failure on its request.

Scrapy calls ``download_error`` when a download failed and no errback took
the failure, whatever raised it: the download itself, or a downloader
middleware's ``process_response`` (a corrupt gzip body, a decompression
bomb), which no ``process_exception`` sees. The failure's text is put in the
request's meta (``crawlhub.meta.FAILURE``, never written to Redis), where the
lease warden finds it as the dead letter's reason (crawlhub/frontier/warden.py).
An answer that passes ``DOWNLOAD_MAXSIZE`` without a Content-Length is cancelled
by Scrapy with a bare cancellation error: the reason then names the limit.
The log lines are Scrapy's own.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from scrapy import Spider, logformatter
from scrapy.crawler import Crawler
from scrapy.http import Request
from twisted.python.failure import Failure

from crawlhub import meta
from crawlhub._utils.errors import download_failure_text

if TYPE_CHECKING:
    from typing_extensions import Self


class LogFormatter(logformatter.LogFormatter):
    def __init__(self, maxsize: int = 0) -> None:
        self.maxsize = maxsize

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        return cls(crawler.settings.getint("DOWNLOAD_MAXSIZE"))

    def download_error(self, failure: Failure, request: Request, spider: Spider | None = None,
                       errmsg: str | None = None) -> Any:
        error = failure.value if failure.value is not None else Exception("download failed")
        request.meta[meta.FAILURE] = (errmsg or download_failure_text(error, request, self.maxsize))[:1000]
        return super().download_error(failure, request, spider, errmsg)  # type: ignore[arg-type]
