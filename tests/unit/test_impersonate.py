"""The impersonate rung and the ladder's wiring, without a network (#31)."""

from __future__ import annotations

import asyncio
import ssl

import pytest
from scrapy.exceptions import (
    CannotResolveHostError,
    DownloadConnectionRefusedError,
    DownloadFailedError,
    DownloadTimeoutError,
    ResponseDataLossError,
)
from scrapy.http import Request
from scrapy.utils.test import get_crawler

from crawlhub import meta
from crawlhub.browser import HANDLER as BROWSER_HANDLER
from crawlhub.downloadermiddlewares.ladder import pinned
from crawlhub.impersonate import HANDLER, SCRAPY_HANDLER, Impersonator, _error, _proxy_auth, watchdog
from crawlhub.ladder import format_ladder
from crawlhub.profiles import load_profiles
from crawlhub.roles import available_rungs
from spiders.quotes import QuotesSpider
from spiders.quotes_js import QuotesJsSpider
from tests.helpers import project_settings
from tests.sites.fingerprint import BROWSERS, client_hello, ja4
from tests.unit.test_browser import spider_settings


def python_client_hello() -> bytes:
    """The first bytes Python's own TLS client (OpenSSL, as Scrapy's Twisted client) sends."""
    context = ssl.create_default_context()
    tls = context.wrap_bio(ssl.MemoryBIO(), outgoing := ssl.MemoryBIO(), server_hostname="shop.example")
    with pytest.raises(ssl.SSLWantReadError):
        tls.do_handshake()
    return outgoing.read()


def test_ja4_reads_a_client_hello_and_openssl_is_not_a_browser():
    hello = python_client_hello()
    fields = client_hello(hello)
    assert fields["sni"] and 0x0304 in fields["versions"] and fields["ciphers"]
    fingerprint = ja4(hello)
    assert fingerprint.startswith("t13d") and fingerprint.count("_") == 2 and fingerprint not in BROWSERS
    assert ja4(hello) == fingerprint  # the same client, the same fingerprint
    with pytest.raises(ValueError):
        client_hello(b"GET / HTTP/1.1\r\n\r\n")


def test_the_tls_target_follows_the_header_profile():
    impersonator = Impersonator(get_crawler(settings_dict=project_settings()))
    for profile in load_profiles():
        agent = next(v for k, v in profile.headers if k.lower() == "user-agent")
        request = Request("https://shop.example/", headers={"User-Agent": agent})
        assert impersonator.target_for(request) == (profile.family, True), profile.id
    # no browser User-Agent: the default target with its own browser headers
    assert impersonator.target_for(Request("https://shop.example/", headers={"User-Agent": "crawlhub/0.1"})) == ("chrome", False)
    pinned_target = Request("https://shop.example/", meta={meta.IMPERSONATE_TARGET: "safari"})
    assert impersonator.target_for(pinned_target) == ("safari", True)


def test_curl_errors_are_scrapys_download_errors():
    class CurlFailure(Exception):
        def __init__(self, code):
            super().__init__(f"curl: ({code}) failed")
            self.code = code

    for code, kind in ((6, CannotResolveHostError), (7, DownloadConnectionRefusedError), (28, DownloadTimeoutError),
                       (56, ResponseDataLossError), (35, DownloadFailedError)):
        error = _error(CurlFailure(code), "https://shop.example/")
        assert isinstance(error, kind) and "https://shop.example/" in str(error) and f"curl error {code}" in str(error)


def test_the_proxy_credentials_come_from_the_header_scrapy_set():
    request = Request("https://shop.example/", headers={"Proxy-Authorization": "Basic Y3Jhd2xlcjpzM2NyM3Q6cHc="})
    assert _proxy_auth(request) == ("crawler", "s3cr3t:pw")
    assert _proxy_auth(Request("https://shop.example/")) is None


def test_every_spider_gets_the_impersonate_rung_in_front_of_its_handler():
    plain = spider_settings(QuotesSpider)
    assert {k: v for k, v in plain.getdict("DOWNLOAD_HANDLERS").items() if v} == {"http": HANDLER, "https": HANDLER}
    assert available_rungs(plain) == ("plain", "impersonate")
    browser = spider_settings(QuotesJsSpider)
    assert browser.getdict("DOWNLOAD_HANDLERS") == {"http": BROWSER_HANDLER, "https": BROWSER_HANDLER}
    assert available_rungs(browser) == ("plain", "impersonate", "browser")
    off = spider_settings(QuotesSpider, IMPERSONATE_ENABLED=False)
    assert HANDLER not in off.getdict("DOWNLOAD_HANDLERS").values() and available_rungs(off) == ("plain",)
    own = spider_settings(QuotesSpider, DOWNLOAD_HANDLERS={"https": "myproject.handlers.Mine"})
    assert own.getdict("DOWNLOAD_HANDLERS")["https"] == "myproject.handlers.Mine"  # a project's own is left alone
    assert available_rungs(own) == ("plain",)
    assert SCRAPY_HANDLER == "scrapy.core.downloader.handlers.http11.HTTP11DownloadHandler"


def test_scrapys_own_handler_is_known_by_its_path_or_its_class_and_nothing_else_is():
    from scrapy.core.downloader.handlers.http11 import HTTP11DownloadHandler

    from crawlhub.roles import is_scrapy_handler

    assert is_scrapy_handler(SCRAPY_HANDLER) and is_scrapy_handler(HTTP11DownloadHandler)
    subclass = type("Own", (HTTP11DownloadHandler,), {})
    for other in (subclass, HANDLER, "myproject.handlers.Mine", None, object):
        assert not is_scrapy_handler(other), other
    own = spider_settings(QuotesSpider, DOWNLOAD_HANDLERS={"https": HTTP11DownloadHandler})
    assert own.getdict("DOWNLOAD_HANDLERS")["https"] == HANDLER  # the class, as a project may name it: put behind


def test_a_spider_or_a_request_pins_a_rung():
    crawler = get_crawler(QuotesSpider, settings_dict=project_settings())
    crawler.spider = QuotesSpider()
    assert pinned(crawler, Request("https://shop.example/")) is None
    assert pinned(crawler, Request("https://shop.example/", meta={meta.RUNG: "impersonate"})) == "impersonate"
    crawler.spider.rung = "browser"
    assert pinned(crawler, Request("https://shop.example/")) == "browser"
    with pytest.raises(ValueError, match="not one of plain, impersonate, browser"):
        pinned(crawler, Request("https://shop.example/", meta={meta.RUNG: "stealth"}))
    # the ladder's own choices belong to one download, not to the links a page yields
    assert {meta.DOWNLOAD_RUNG, meta.PROBE, meta.CLIMBED} <= set(meta.PARENT_ONLY)


def test_status_shows_a_domains_rung_why_and_its_next_probe():
    lines = format_ladder({"shop.example": {"rung": "impersonate", "since": 1000.0, "probe_at": 1600.0, "backoff": 600,
                                            "why": "HTTP 403 on plain (https://shop.example/p/1)", "from": "plain"}},
                          now=1100.0)
    assert len(lines) == 1
    assert "shop.example" in lines[0] and "impersonate" in lines[0] and "HTTP 403 on plain" in lines[0]
    assert "probes plain in 500 s" in lines[0]


def test_a_block_is_a_code_a_ban_marker_or_the_spiders_own_verdict():
    from scrapy import Spider
    from scrapy.http import HtmlResponse

    from crawlhub.downloadermiddlewares.ladder import LadderBlockMiddleware

    class Shop(Spider):
        name = "shop"
        ban_markers = ("access denied",)

        def is_blocked(self, response):
            return "verify you are human" if response.css("form#challenge") else ""

    crawler = get_crawler(Shop, settings_dict=project_settings())
    crawler.spider = Shop()
    blocks = LadderBlockMiddleware(crawler)

    def page(body: str, status: int = 200) -> HtmlResponse:
        return HtmlResponse("https://shop.example/", status=status, body=body.encode(), encoding="utf-8")

    assert blocks.blocked(page("<html>fine</html>")) == ""
    assert blocks.blocked(page("<html>fine</html>", 403)) == "HTTP 403"
    assert blocks.blocked(page("<html>Access Denied</html>")) == "ban marker 'access denied'"
    assert blocks.blocked(page('<html><form id="challenge"></form></html>')) == "verify you are human"
    assert blocks.blocked(page("<html>fine</html>", 429)) == ""  # a 429 slows the domain down (politeness), no climb


class _WedgedSession:
    """curl_cffi's AsyncSession as lexiforest/curl_cffi#578 reports it: a request that never ends, its own timeout
    not firing; and a close that never ends either."""

    def __init__(self) -> None:
        self.requests = 0

    async def request(self, *args, **kwargs):
        self.requests += 1
        await asyncio.Event().wait()

    async def close(self) -> None:
        await asyncio.Event().wait()


def test_a_download_curl_never_ends_is_ended_by_the_watchdog_as_a_timeout_on_a_new_session():
    crawler = get_crawler(settings_dict=project_settings(DOWNLOAD_TIMEOUT=0.05))
    impersonator = Impersonator(crawler)
    wedged = impersonator.session = _WedgedSession()

    async def fetch() -> BaseException:
        with pytest.raises(DownloadTimeoutError) as raised:
            await impersonator.fetch(Request("https://shop.example/p/1"))
        return raised.value

    error = asyncio.run(fetch())
    assert "shop.example/p/1" in str(error) and "did not fire" in str(error), error
    assert wedged.requests == 1 and crawler.stats.get_value("impersonate/stuck") == 1
    assert impersonator.session is None, "the next impersonated request opens a new session"
    assert watchdog(30.0) == 60.0 and watchdog(0.05) == 1.05
